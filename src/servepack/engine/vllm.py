"""The vLLM engine: `vllm serve MODEL` on this host, gated on /health and /v1/models, torn down as a whole tree.

vLLM loads its model itself, from a Hugging Face repository id (pinned by `--revision`) or a model directory, so
servepack hashes no weights for it (such runs are never claim-eligible on model bytes). The preset's `[vllm]`
table gives the parallel layout and memory settings; its `flags` pass through as further `vllm serve` flags.
vLLM starts worker processes: the server runs in its own process group (and dies with servepack through
PR_SET_PDEATHSIG), teardown kills the whole group, and every process seen in it is recorded in the receipt.
For several nodes (`nodes > 1`) vLLM runs on a Ray cluster that must already be up; servepack launches the head's
`vllm serve` only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import httpx

from servepack.engine.base import Endpoint, EngineProcess, LaunchRequest, Split, single_host
from servepack.engine.environ import server_env
from servepack.engine.locate import EngineFacts, Why, pin_matches, version_text
from servepack.engine.rest import VllmRest
from servepack.engine.server import SERVERS_INDEX, Server, group_members, launch, preset_args, tail
from servepack.errors import EngineError
from servepack.packs import LoadedPack
from servepack.packs.flag_policy import check_flags, preset_tokens
from servepack.packs.schema import EnginePin, Preset, Topology, VllmPreset
from servepack.settings import Settings
from servepack.weights.resolve import ModelRef, sha256_file

BINARY = "vllm"
ENV_VAR = "SERVEPACK_VLLM"  # a vllm executable to use instead of the one on PATH
LOG_NAME = "vllm.log"
LABEL = "vllm serve"
PROBE_TIMEOUT_S = 120.0
# Run by the vllm launcher's own Python: what it imports, as JSON. Each fact says why when it cannot be had.
_PROBE = """
import json
out = {}
try:
    import vllm
    out["vllm_import"] = str(vllm.__version__)
except Exception as exc:
    out["vllm_import"] = "unavailable: import vllm failed (%s)" % type(exc).__name__
try:
    import torch
    out["torch"] = str(torch.__version__)
    out["cuda"] = str(torch.version.cuda) if torch.version.cuda else "unavailable: torch was built without CUDA"
except Exception as exc:
    out["torch"] = out["cuda"] = "unavailable: import torch failed (%s)" % type(exc).__name__
print(json.dumps(out))
"""


def served_name(ref: ModelRef, preset: Preset) -> str:
    """The name requests use: the preset's served_model_name, else the model reference (vLLM's own default)."""
    v = preset.vllm
    return v.served_model_name if v is not None and v.served_model_name else ref.ref


def serve_args(ref: ModelRef, preset: Preset, *, host: str, port: int) -> list[str]:
    """`vllm serve` arguments after the subcommand, by vLLM's documented flag names."""
    v = preset.vllm or VllmPreset()
    args = [ref.ref]
    if ref.revision:
        args += ["--revision", ref.revision]
    args += ["--host", host, "--port", str(port), "--served-model-name", served_name(ref, preset),
             "--tensor-parallel-size", str(v.tensor_parallel_size),
             "--pipeline-parallel-size", str(v.pipeline_parallel_size)]
    if v.max_model_len is not None:
        args += ["--max-model-len", str(v.max_model_len)]
    if v.gpu_memory_utilization is not None:
        args += ["--gpu-memory-utilization", f"{v.gpu_memory_utilization:g}"]
    if v.dtype is not None:
        args += ["--dtype", v.dtype]
    if v.quantization is not None:
        args += ["--quantization", v.quantization]
    if v.executor is not None:
        args += ["--distributed-executor-backend", v.executor]
    return args + preset_args(preset.flags)


def _python_of(path: Path) -> Path | None:
    """The interpreter a console-script launcher names on its `#!` line, if it names a Python."""
    try:
        with path.open("rb") as fh:
            first = fh.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if not words:
        return None
    prog = words[1] if Path(words[0]).name == "env" and len(words) > 1 else words[0]
    return Path(prog) if Path(prog).name.startswith("python") else None


def _python_facts(path: Path) -> dict[str, str]:
    python = _python_of(path)
    if python is None:
        why = f"unavailable: {path} names no Python interpreter on its #! line, so its imports cannot be asked"
        return {"vllm_import": why, "torch": why, "cuda": why}
    if shutil.which(str(python)) is None:
        why = f"unavailable: the launcher's interpreter {python} is not executable here"
        return {"vllm_import": why, "torch": why, "cuda": why}
    try:
        done = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              check=False, stdin=subprocess.DEVNULL, env=server_env("python").env)
        doc = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        doc, why = None, f"unavailable: probing {python} failed ({type(exc).__name__})"
    else:
        why = f"unavailable: probing {python} printed nothing readable (exit {done.returncode})"
    keys = ("vllm_import", "torch", "cuda")
    if not isinstance(doc, dict):
        return dict.fromkeys(keys, why)
    return {k: str(doc.get(k, why)) for k in keys}


def gpu_list() -> str:
    """The GPUs nvidia-smi lists (index, name, memory, driver), or 'unavailable: why'."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "unavailable: nvidia-smi not found on PATH"
    try:
        done = subprocess.run([smi, "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable: nvidia-smi failed ({type(exc).__name__})"
    lines = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
    if done.returncode != 0 or not lines:
        first = (done.stderr.strip().splitlines() or ["no output"])[0]
        return f"unavailable: nvidia-smi exited {done.returncode}: {first}"
    return "; ".join(lines)


def runtime_facts(path: Path) -> dict[str, str]:
    """vLLM's import version, torch and CUDA versions from the launcher's own Python, and the GPU list."""
    return {**_python_facts(path), "gpus": gpu_list()}


def reported_version(text: str) -> str | None:
    """The version `vllm --version` prints (a bare `0.8.5`, or a line naming it)."""
    m = re.search(r"\b(\d+\.\d+(?:\.\d+)?(?:[.+\-]?[A-Za-z0-9.+\-]*)?)", text)
    return m.group(1) if m else None


def wait_listed(server: Server, name: str, deadline_s: float) -> float:
    """After /health: poll /v1/models until it lists `name`; seconds waited. EngineError with the log tail else."""
    start = time.monotonic()
    last = "no answer yet"
    with httpx.Client(timeout=5.0) as client:
        while True:
            if not server.is_alive():
                raise EngineError(f"{LABEL} exited with code {server.process.returncode} before /v1/models listed "
                                  f"{name!r}; log {server.log_path}:\n{tail(server.log_path)}")
            try:
                r = client.get(f"{server.base_url}/v1/models")
                if r.status_code == 200:
                    data = r.json().get("data") if isinstance(r.json(), dict) else None
                    ids = [m.get("id") for m in data if isinstance(m, dict)] if isinstance(data, list) else []
                    if name in ids:
                        return time.monotonic() - start
                    last = f"it lists {ids}"
                else:
                    last = f"HTTP {r.status_code}"
            except (httpx.TransportError, ValueError) as exc:
                last = type(exc).__name__
            if time.monotonic() - start > deadline_s:
                raise EngineError(
                    f"{LABEL} answered /health but /v1/models did not list {name!r} within {deadline_s:.0f} s "
                    f"({last}); check the preset's served_model_name or the log {server.log_path}:\n"
                    f"{tail(server.log_path)}")
            time.sleep(0.2)


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


class VllmEngine:
    """`vllm` from --server-bin, SERVEPACK_VLLM, or PATH; the model by repository id or directory."""

    name: ClassVar[str] = "vllm"
    launches: ClassVar[bool] = True

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.load()

    def split(self, loaded: LoadedPack, topology: Topology, override: Path | None) -> Split:
        raise single_host(self.name)

    def locate(self, pin: EnginePin, override: Path | None) -> EngineFacts:
        chosen: Why
        if override is not None:
            path, chosen = override, "flag"
        elif os.environ.get(ENV_VAR):
            path, chosen = Path(os.environ[ENV_VAR]), "env"
        else:
            found = shutil.which(BINARY)
            if found is None:
                how = f"pip install '{pin.package}=={pin.package_version}'" if pin.package else "install vLLM"
                raise EngineError(f"vllm not found on PATH: {how} on a CUDA host, or pass --server-bin PATH / "
                                  f"set {ENV_VAR}")
            path, chosen = Path(found), "pin"
        path = path.expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise EngineError(f"vllm executable {path} does not exist or is not executable; fix the path")
        text = version_text(path)
        version = reported_version(text)
        match, reason = pin_matches(pin, text, version, chosen)
        return EngineFacts(name=BINARY, path=path.resolve(), chosen_by=chosen, sha256=sha256_file(path),
                           version_text=text, package=pin.package if chosen == "pin" else None,
                           package_version=version, commit=None, pin_match=match, pin_reason=reason,
                           runtime=runtime_facts(path))

    def argv(self, req: LaunchRequest) -> list[str]:
        if req.model_ref is None:
            raise EngineError("engine vllm needs a model it loads itself: model.source kind \"hf-repo\" or \"dir\"")
        binary = str(req.facts.path) if req.facts is not None else BINARY
        return [binary, "serve", *serve_args(req.model_ref, req.preset, host=req.host, port=req.port)]

    @contextlib.contextmanager
    def launch(self, req: LaunchRequest) -> Iterator[Endpoint]:
        check_flags(self.name, preset_tokens(req.preset.flags), req.allowed_flags, "vllm serve launch")
        argv = self.argv(req)
        assert req.model_ref is not None
        name = served_name(req.model_ref, req.preset)
        sha = req.facts.sha256 if req.facts else None
        with launch(argv, host=req.host, port=req.port, model_alias=name, log_path=req.log_dir / LOG_NAME,
                    health_timeout_s=req.health_timeout_s, progress=req.progress, name=LABEL,
                    env=server_env("python").env,
                    index_dir=self.settings.cache_dir / SERVERS_INDEX) as server:
            head = EngineProcess(role="server", host=req.host, argv=argv, binary_sha256=sha, pid=server.pid,
                                 log=LOG_NAME)
            endpoint = Endpoint(base_url=server.base_url, model=name, processes=[head], watch=[server],
                                rest_check=VllmRest(server.base_url))
            try:
                healthy_s = server.ready_s or 0.0
                listed_s = wait_listed(server, name, max(5.0, req.health_timeout_s - healthy_s))
                endpoint.ready_s = healthy_s + listed_s
                self._note_workers(endpoint, server.pid, req.host)
                yield endpoint
            finally:
                self._note_workers(endpoint, server.pid, req.host)
                head.exit_code = server.stop()

    @staticmethod
    def _note_workers(endpoint: Endpoint, pgid: int, host: str) -> None:
        """Record every other process in the server's group (vLLM's workers) once; teardown kills the group."""
        known = {p.pid for p in endpoint.processes}
        for pid in group_members(pgid):
            if pid not in known:
                endpoint.processes.append(EngineProcess(role="worker", host=host, argv=_cmdline(pid),
                                                        binary_sha256=None, pid=pid))
