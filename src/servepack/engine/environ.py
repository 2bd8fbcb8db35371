"""The environment of every process servepack starts to serve or measure, built from an allow-list.

llama.cpp reads `LLAMA_ARG_<FLAG>` for nearly every flag (`LLAMA_ARG_TOOLS`, `LLAMA_ARG_LOG_FILE`, ...), vLLM reads
`VLLM_*` (`VLLM_API_KEY`, ...), and tokens sit in the environment of the user's shell: none of that may configure the
server behind servepack or reach its log. A server, an RPC worker's rpc-server, llama-bench and vLLM get only:
where programs and libraries are (PATH, LD_LIBRARY_PATH, PYTHONPATH, VIRTUAL_ENV), who and where the user is
(HOME, USER, LOGNAME, TMPDIR, LANG, LC_*, TZ), which devices to use (CUDA_VISIBLE_DEVICES and its kin), and for a
Python engine its caches and collective-communication settings. Variables named in SERVEPACK_SERVER_ENV pass too
(never `LLAMA_ARG_*` nor a secret-looking name). The names dropped (never their values) go into the receipt.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from servepack.errors import UsageError
from servepack.settings import Settings

Kind = Literal["native", "python", "servepack"]
PASS_ENV = "SERVEPACK_SERVER_ENV"

BASE = frozenset({
    "PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "HOME", "USER", "LOGNAME", "TMPDIR", "LANG", "LANGUAGE",
    "TZ",
    # devices: which GPUs a process may use, and how they are numbered
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "CUDA_PATH", "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
    "HSA_OVERRIDE_GFX_VERSION", "ONEAPI_DEVICE_SELECTOR", "ZE_AFFINITY_MASK", "GGML_VK_VISIBLE_DEVICES",
})
BASE_PREFIXES = ("LC_",)
# A Python engine (vLLM): where Hugging Face caches live, offline mode, and how its workers find each other.
PYTHON = frozenset({"HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "XDG_CACHE_HOME",
                    "RAY_ADDRESS", "VLLM_HOST_IP", "MASTER_ADDR", "MASTER_PORT", "TORCH_CUDA_ARCH_LIST"})
PYTHON_PREFIXES = ("NCCL_", "GLOO_")
# servepack's own worker (`servepack worker`): its settings, which its own rpc-server then does not get.
SERVEPACK_PREFIXES = ("SERVEPACK_",)
# Never passed, even when named in SERVEPACK_SERVER_ENV: flags in disguise, and secrets.
NEVER = re.compile(r"^(LLAMA_ARG_|LD_PRELOAD$|LD_AUDIT$)|TOKEN|KEY|SECRET|PASSWORD|PASSWD|AUTH|CREDENTIAL|COOKIE",
                   re.IGNORECASE)


@dataclass(frozen=True)
class ServerEnv:
    """The environment a started process gets, and the names of the variables left out (values never kept)."""

    env: dict[str, str]
    dropped: tuple[str, ...]


def _allowed(name: str, kind: Kind, named: frozenset[str]) -> bool:
    if name in BASE or name.startswith(BASE_PREFIXES) or name in named:
        return True
    if kind in ("python", "servepack") and (name in PYTHON or name.startswith(PYTHON_PREFIXES)):
        return True
    return kind == "servepack" and name.startswith(SERVEPACK_PREFIXES)


def passed_by_name(settings: Settings | None = None) -> frozenset[str]:
    """The names SERVEPACK_SERVER_ENV adds; one refused (LLAMA_ARG_*, a secret) is a usage error, named."""
    names = (settings or Settings.load()).server_env_pass
    for name in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise UsageError(f"{PASS_ENV}: {name!r} is not a variable name; list names separated by commas or spaces")
        if NEVER.search(name):
            raise UsageError(f"{PASS_ENV}: {name} cannot be passed to the server (a flag in disguise or a secret); "
                             "remove it from the list")
    return frozenset(names)


def server_env(kind: Kind = "native", *, source: Mapping[str, str] | None = None,
               settings: Settings | None = None, set_vars: Mapping[str, str] | None = None) -> ServerEnv:
    """The environment for a process of `kind`, from `source` (default: servepack's own) through the allow-list;
    `set_vars` are servepack's own settings for it (a worker's CUDA_VISIBLE_DEVICES, LLAMA_CACHE)."""
    source = os.environ if source is None else source
    named = passed_by_name(settings)
    env = {k: v for k, v in source.items() if _allowed(k, kind, named)}
    dropped = tuple(sorted(k for k in source if k not in env))
    env.update(set_vars or {})
    return ServerEnv(env=env, dropped=dropped)


ENGINE_KIND: dict[str, Kind] = {"vllm": "python"}


def engine_env_kind(engine: str) -> Kind:
    """The allow-list an engine's server processes get (llama.cpp: native)."""
    return ENGINE_KIND.get(engine, "native")
