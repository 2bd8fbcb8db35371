"""The llama.cpp engine: a local llama-server, located, launched, probed and torn down; with a [topology], the
head of an RPC split, launched after the workers it starts itself and after every worker answered."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx

from servepack.engine.base import Endpoint, EngineProcess, LaunchRequest, Liveness, Split
from servepack.engine.locate import EngineFacts, locate_binary
from servepack.engine.rest import LlamaServerRest
from servepack.engine.rpc import (
    RemoteWorkerWatch,
    WorkerInfo,
    bind_ports,
    check_protocols,
    check_reachable,
    fetch_info,
    fingerprint_port,
    head_rpc_protocol,
    locate_rpc_server,
    rpc_head,
    worker_argv,
    worker_env,
)
from servepack.engine.server import SERVERS_INDEX, Server, build_argv, launch
from servepack.errors import EngineError
from servepack.host.fingerprint import fingerprint
from servepack.packs import LoadedPack
from servepack.packs.flag_policy import check_flags, preset_tokens
from servepack.packs.schema import EnginePin, Topology
from servepack.settings import Settings

LOG_NAME = "server.log"
PROPS_KEPT = ("build_info", "model_path", "n_ctx", "total_slots", "chat_template_caps", "modalities")


def read_props(base_url: str) -> dict[str, Any] | None:
    """The build facts llama-server states about itself on GET /props, or None where it does not answer."""
    try:
        r = httpx.get(f"{base_url}/props", timeout=10)
        if r.status_code == 200:
            body = r.json()
            if not isinstance(body, dict):
                return None
            dgs = body.get("default_generation_settings")
            dgs = dgs if isinstance(dgs, dict) else {}
            out = {k: body[k] for k in PROPS_KEPT if k in body}
            out["n_ctx"] = out.get("n_ctx", dgs.get("n_ctx"))
            return out
    except (httpx.HTTPError, ValueError):
        pass
    return None


class LlamaCppEngine:
    """llama-server from the pinned package, SERVEPACK_LLAMA_SERVER, or --server-bin."""

    name: ClassVar[str] = "llama.cpp"
    launches: ClassVar[bool] = True

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.load()

    def locate(self, pin: EnginePin, override: Path | None) -> EngineFacts:
        return locate_binary("llama-server", pin, override)

    def split(self, loaded: LoadedPack, topology: Topology, override: Path | None) -> Split:
        """An RPC split: the head is --server-bin / SERVEPACK_LLAMA_SERVER, else the pin's RPC build; every worker
        the run starts on port 0 gets a free port now."""
        return Split(head=rpc_head(loaded, override, self.settings.cache_dir), topology=bind_ports(topology))

    def argv(self, req: LaunchRequest) -> list[str]:
        if req.facts is None or req.model_path is None:
            raise EngineError("llama.cpp needs a located llama-server and a model file")
        argv = build_argv(req.facts.path, req.model_path, req.preset, host=req.host, port=req.port,
                          extra_files=req.extra_files)
        return argv + (req.topology.head_args() if req.topology is not None else [])

    @contextlib.contextmanager
    def launch(self, req: LaunchRequest) -> Iterator[Endpoint]:
        check_flags(self.name, preset_tokens(req.preset.flags), req.allowed_flags, "llama-server launch")
        argv = self.argv(req)
        assert req.model_path is not None
        alias = str(req.preset.flags.get("alias", req.model_path.stem))
        with contextlib.ExitStack() as stack:
            workers = self._workers(req, stack) if req.topology is not None else []
            server = stack.enter_context(launch(
                argv, host=req.host, port=req.port, model_alias=alias, log_path=req.log_dir / LOG_NAME,
                health_timeout_s=req.health_timeout_s, progress=req.progress,
                index_dir=self.settings.cache_dir / SERVERS_INDEX))
            head = EngineProcess(role="head" if workers else "server", host=req.host, argv=argv,
                                 binary_sha256=req.facts.sha256 if req.facts else None, pid=server.pid, log=LOG_NAME,
                                 fingerprint=fingerprint() if workers else None,
                                 rpc_protocol=head_rpc_protocol(req.facts.path if req.facts else None))
            # Workers are watched first, so a dead worker is named even when it took the head down with it.
            watch: list[Liveness] = [w for _, _, ws in workers for w in ws]
            watch.append(server)
            endpoint = Endpoint(base_url=server.base_url, model=server.model,
                                processes=[head, *(p for p, _, _ in workers)], ready_s=server.ready_s,
                                props=read_props(server.base_url), watch=watch,
                                rest_check=LlamaServerRest(server.base_url))

            def restart() -> float:
                """A fresh server: stop the head and start it again, same argv and port; the seconds it took."""
                nonlocal server
                t0 = time.monotonic()
                server.stop()
                server = stack.enter_context(launch(
                    argv, host=req.host, port=req.port, model_alias=alias, log_path=req.log_dir / LOG_NAME,
                    health_timeout_s=req.health_timeout_s, progress=None,
                    index_dir=self.settings.cache_dir / SERVERS_INDEX))
                head.pid, watch[-1] = server.pid, server
                return time.monotonic() - t0

            if not workers:  # an RPC split's workers keep the model's layers: no fresh head without fresh workers
                endpoint.restart = restart
            try:
                yield endpoint
            finally:
                head.exit_code = server.stop()
                for proc, started, _ in workers:
                    if started is not None:
                        proc.exit_code = started.stop()

    def _workers(self, req: LaunchRequest, stack: contextlib.ExitStack,
                 ) -> list[tuple[EngineProcess, Server | None, list[Liveness]]]:
        """Start the workers the run starts, check every worker answers and speaks the head's RPC protocol."""
        topo: Topology | None = req.topology
        assert topo is not None
        say = req.progress or (lambda _m: None)
        head_binary = req.facts.path if req.facts else None
        started: dict[int, Server] = {}
        for i, w in enumerate(topo.workers):
            if not w.start:
                continue
            argv = worker_argv(locate_rpc_server(head_binary), w)
            started[i] = stack.enter_context(launch(
                argv, host=w.host, port=fingerprint_port(w.port), model_alias="", env=worker_env(w),
                log_path=req.log_dir / f"rpc-worker-{i}.log", health_timeout_s=req.health_timeout_s,
                progress=req.progress, index_dir=self.settings.cache_dir / SERVERS_INDEX,
                name=f"RPC worker {w.address}"))
        check_reachable(list(topo.workers))
        infos: list[tuple[int, WorkerInfo | None, str | None]] = []
        for i, w in enumerate(topo.workers):
            info, why = fetch_info(w)
            if info is None:
                say(f"RPC worker {w.address} serves no fingerprint ({why}): its host is not identified")
            infos.append((i, info, why))
        check_protocols([(topo.workers[i], info) for i, info, _ in infos], head_rpc_protocol(head_binary))
        out: list[tuple[EngineProcess, Server | None, list[Liveness]]] = []
        for i, info, _ in infos:
            w = topo.workers[i]
            server = started.get(i)
            rpc = info.rpc_server if info is not None else None
            proc = EngineProcess(
                role="rpc-worker", host=w.host, argv=rpc.argv if rpc else [], binary_sha256=rpc.sha256 if rpc else None,
                pid=rpc.pid if rpc else None, log=f"rpc-worker-{i}.log" if server else None,
                fingerprint=info.host if info else None, endpoint=w.address,
                rpc_protocol=rpc.protocol if rpc else None)
            # a worker the run started: its process, then its /health (503 as soon as its rpc-server exits)
            watches: list[Liveness] = [server] if server is not None else []
            if info is not None:
                watches.append(RemoteWorkerWatch(w))
            out.append((proc, server, watches))
            say(f"RPC worker {w.address}: " + (f"{info.host.hostname}, protocol {rpc.protocol}" if info and rpc
                                                else "not identified"))
        return out
