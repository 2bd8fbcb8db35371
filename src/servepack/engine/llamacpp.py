"""The llama.cpp engine: one local llama-server process, located, launched, probed and torn down."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx

from servepack.engine.base import Endpoint, EngineProcess, LaunchRequest
from servepack.engine.locate import EngineFacts, locate_binary
from servepack.engine.server import SERVERS_INDEX, build_argv, launch
from servepack.errors import EngineError
from servepack.packs.schema import EnginePin
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

    def argv(self, req: LaunchRequest) -> list[str]:
        if req.facts is None or req.model_path is None:
            raise EngineError("llama.cpp needs a located llama-server and a model file")
        return build_argv(req.facts.path, req.model_path, req.preset, host=req.host, port=req.port,
                          extra_files=req.extra_files)

    @contextlib.contextmanager
    def launch(self, req: LaunchRequest) -> Iterator[Endpoint]:
        argv = self.argv(req)
        assert req.model_path is not None
        alias = str(req.preset.flags.get("alias", req.model_path.stem))
        with launch(argv, host=req.host, port=req.port, model_alias=alias, log_path=req.log_dir / LOG_NAME,
                    health_timeout_s=req.health_timeout_s, progress=req.progress,
                    index_dir=self.settings.cache_dir / SERVERS_INDEX) as server:
            proc = EngineProcess(role="server", host=req.host, argv=argv,
                                 binary_sha256=req.facts.sha256 if req.facts else None, pid=server.pid, log=LOG_NAME)
            endpoint = Endpoint(base_url=server.base_url, model=server.model, processes=[proc],
                                ready_s=server.ready_s, props=read_props(server.base_url), watch=[server])
            try:
                yield endpoint
            finally:
                proc.exit_code = server.stop()
