"""The attach engine: a server someone else already runs. Nothing is launched, located or torn down.

A pack selects it with `[engine] name = "attach"`, `base_url` and `served_model`; `bench --base-url` and
`smoke --base-url` use it directly. The URL must be on this machine's loopback. Engine facts (binary, version,
build) are unavailable, so such runs are never claim-eligible on their engine pin.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

import httpx

from servepack.engine.base import Endpoint, EngineProcess, LaunchRequest, Split, single_host
from servepack.engine.locate import EngineFacts
from servepack.engine.rest import AttachedRest
from servepack.errors import EngineError, ServerDied, UsageError
from servepack.net import require_loopback
from servepack.packs import LoadedPack
from servepack.packs.schema import EnginePin, Topology


class EndpointWatch:
    """Liveness of a server servepack did not start: it must still answer GET /v1/models."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def check_alive(self) -> None:
        try:
            httpx.get(f"{self.base_url}/v1/models", timeout=10)
        except httpx.TransportError as exc:
            raise ServerDied(f"the attached server at {self.base_url} stopped answering ({type(exc).__name__}); "
                             "partial results kept") from None


def attach(base_url: str, model: str, *, reach: bool = True) -> Endpoint:
    """An endpoint for a running OpenAI-compatible server on loopback (checked by resolving its host) that answers
    GET /v1/models (any HTTP status: what it answers is the measurement's to judge). Nothing answering is one line,
    exit 2, before a results directory is made: it was a run that "stopped answering", exit 1, with an empty results
    directory left. `reach=False` skips the request (a test of what a dead endpoint does to a measurer)."""
    url = require_loopback(base_url.rstrip("/").removesuffix("/v1"))
    if not model:
        raise UsageError("--model: name the model the attached server serves")
    if reach:
        try:
            httpx.get(f"{url}/v1/models", timeout=10)
        except httpx.TransportError as exc:
            raise EngineError(f"attached server {url} does not answer ({type(exc).__name__}); start it first or "
                              "fix --base-url") from None
    host = urlsplit(url).hostname or ""
    return Endpoint(base_url=url, model=model, launched=False,
                    processes=[EngineProcess(role="attached", host=host, argv=[], binary_sha256=None)],
                    watch=[EndpointWatch(url)], rest_check=AttachedRest(url))


class AttachEngine:
    name: ClassVar[str] = "attach"
    launches: ClassVar[bool] = False

    def locate(self, pin: EnginePin, override: Path | None) -> EngineFacts | None:
        if override is not None:
            raise UsageError("--server-bin: the attach engine launches nothing; drop the flag")
        return None

    def split(self, loaded: LoadedPack, topology: Topology, override: Path | None) -> Split:
        raise single_host(self.name)

    def argv(self, req: LaunchRequest) -> list[str]:
        return []

    @contextlib.contextmanager
    def launch(self, req: LaunchRequest) -> Iterator[Endpoint]:
        if not req.pin.base_url or not req.pin.served_model:
            raise UsageError("engine attach: the pack must set engine.base_url and engine.served_model")
        endpoint = attach(req.pin.base_url, req.pin.served_model, reach=False)  # reached here, its status judged
        try:
            r = httpx.get(f"{endpoint.base_url}/v1/models", timeout=min(req.health_timeout_s, 30))
        except httpx.TransportError as exc:
            raise EngineError(f"attached server {endpoint.base_url} does not answer ({type(exc).__name__}); "
                              "start it first or fix engine.base_url") from None
        if r.status_code >= 400:
            raise EngineError(f"attached server {endpoint.base_url}/v1/models answered HTTP {r.status_code}")
        yield endpoint
