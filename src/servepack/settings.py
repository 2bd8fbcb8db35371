"""Defaults and environment variables (SERVEPACK_*, HF_ENDPOINT, HF_HUB_OFFLINE), read in this one place."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from servepack.errors import UsageError

BINARY_ENV = {"llama-server": "SERVEPACK_LLAMA_SERVER", "llama-bench": "SERVEPACK_LLAMA_BENCH",
              "rpc-server": "SERVEPACK_RPC_SERVER"}
BUILD_JOBS_ENV = "SERVEPACK_BUILD_JOBS"
MAX_BUILD_JOBS = 1024


def _cache_home(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "servepack"


def _positive_seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{name}={raw!r}: must be a positive number of seconds; fix or unset it")
    return value


HOUR_S = 3600.0
WEEK_S = 7 * 86400.0


class DurationError(ValueError):
    """A duration that does not parse (`out_of_range` False) or lies outside its range (True)."""

    def __init__(self, message: str, *, out_of_range: bool) -> None:
        super().__init__(message)
        self.out_of_range = out_of_range


_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?|-\S*|inf(?:inity)?|nan", re.ASCII)


def duration_range(most_s: float = HOUR_S, *, positive: bool = False) -> str:
    """The range of a duration option in words, as its help and its out-of-range error say it: '0 to 1 hour'."""
    return f"{'more than 0' if positive else '0'} to {_span_words(most_s)}"


def parse_duration(text: str, *, most_s: float = HOUR_S, positive: bool = False) -> float:
    """The one duration grammar of every option that takes one: '60s', '60', '2m', '1.5m', '1.5h', '500ms', '0',
    '1e3s' (ASCII digits; seconds unless suffixed; case and spaces ignored) → seconds, from 0 (or more than 0 when
    `positive`) to `most_s`; raises DurationError with the reason: a number outside the range (negative, huge,
    infinite, NaN) is "out of range" with the range, anything else is not a duration."""
    t = text.strip().lower()
    scale = 1.0
    if t.endswith("ms"):
        t, scale = t[:-2], 0.001
    elif t.endswith("s"):
        t = t[:-1]
    elif t.endswith("m"):
        t, scale = t[:-1], 60.0
    elif t.endswith("h"):
        t, scale = t[:-1], 3600.0
    t = t.strip()
    number = t.removeprefix("+")
    if not t or not _NUMBER.fullmatch(number):  # float() alone takes '1_000' and other scripts' digits
        raise DurationError(f"{text!r} is not a duration (e.g. 60s, 2m, 0)", out_of_range=False)
    try:
        value = float(number) * scale
    except ValueError:  # '-' followed by no number
        raise DurationError(f"{text!r} is not a duration (e.g. 60s, 2m, 0)", out_of_range=False) from None
    if value != value or value < 0 or (positive and value == 0) or value > most_s:
        raise DurationError(f"{text!r} is out of range: {duration_range(most_s, positive=positive)}",
                            out_of_range=True)
    return value


def _span_words(seconds: float) -> str:
    for unit, size in (("week", WEEK_S), ("day", 86400.0), ("hour", HOUR_S), ("minute", 60.0)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds:g} s"


def _build_jobs(env: Mapping[str, str]) -> int | None:
    raw = (env.get(BUILD_JOBS_ENV) or "").strip()
    if not raw:
        return None
    if not re.fullmatch(r"[0-9]{1,6}", raw) or not 1 <= int(raw) <= MAX_BUILD_JOBS:
        raise UsageError(f"{BUILD_JOBS_ENV}={raw!r}: must be a whole number of parallel build jobs from 1 to "
                         f"{MAX_BUILD_JOBS}; fix or unset it")
    return int(raw)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Settings:
    """Process-wide settings; `load()` reads the environment once."""

    cache_dir: Path
    results_dir: Path
    llama_server: str | None
    llama_bench: str | None
    health_timeout_s: float
    hf_endpoint: str | None = None
    hf_offline: bool = False
    verify_model: bool = False  # re-hash the model file even when its identity is unchanged (--verify-model)
    sandbox: str = "auto"  # how the executed smoke layer is isolated: auto, namespaces, bwrap, off
    rpc_server: str | None = None  # llama.cpp's rpc-server for RPC workers (SERVEPACK_RPC_SERVER)
    build_jobs: int | None = None  # parallel compile jobs of an engine build (SERVEPACK_BUILD_JOBS); None: derived
    # more variables the server may see, by name (SERVEPACK_SERVER_ENV, comma or space separated); see engine.environ
    server_env_pass: tuple[str, ...] = ()

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        return cls(
            cache_dir=Path(env.get("SERVEPACK_CACHE_DIR") or _cache_home(env)),
            results_dir=Path(env.get("SERVEPACK_RESULTS_DIR") or "results"),
            llama_server=env.get(BINARY_ENV["llama-server"]) or None,
            llama_bench=env.get(BINARY_ENV["llama-bench"]) or None,
            health_timeout_s=_positive_seconds(env, "SERVEPACK_HEALTH_TIMEOUT_S", 300.0),
            hf_endpoint=(env.get("HF_ENDPOINT") or "").rstrip("/") or None,
            hf_offline=_truthy(env.get("HF_HUB_OFFLINE")),
            verify_model=_truthy(env.get("SERVEPACK_VERIFY_MODEL")),
            sandbox=(env.get("SERVEPACK_SANDBOX") or "auto").strip().lower() or "auto",
            rpc_server=env.get(BINARY_ENV["rpc-server"]) or None,
            build_jobs=_build_jobs(env),
            server_env_pass=tuple(n for n in (env.get("SERVEPACK_SERVER_ENV") or "").replace(",", " ").split() if n),
        )

    def binary_from_env(self, name: str) -> str | None:
        """The binary path an environment variable names for `name` (llama-server, llama-bench), if any."""
        return {"llama-server": self.llama_server, "llama-bench": self.llama_bench,
                "rpc-server": self.rpc_server}.get(name)
