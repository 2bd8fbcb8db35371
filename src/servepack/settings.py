"""Defaults and SERVEPACK_* environment variables, read in one place."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def _cache_home() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "servepack"


@dataclass(frozen=True)
class Settings:
    """Process-wide settings; `load()` reads the environment once."""

    cache_dir: Path
    results_dir: Path
    llama_server: str | None
    llama_bench: str | None
    health_timeout_s: float
    verify_model: bool = False  # re-hash the model file even when its identity is unchanged (--verify-model)

    @classmethod
    def load(cls) -> Settings:
        env = os.environ
        return cls(
            cache_dir=Path(env.get("SERVEPACK_CACHE_DIR") or _cache_home()),
            results_dir=Path(env.get("SERVEPACK_RESULTS_DIR") or "results"),
            llama_server=env.get("SERVEPACK_LLAMA_SERVER") or None,
            llama_bench=env.get("SERVEPACK_LLAMA_BENCH") or None,
            health_timeout_s=float(env.get("SERVEPACK_HEALTH_TIMEOUT_S") or 300.0),
            verify_model=(env.get("SERVEPACK_VERIFY_MODEL") or "").strip().lower() in {"1", "true", "yes", "on"},
        )
