"""The sending half of a load point, on one event loop: one endpoint's prompt pool and the request bodies built
before the point's clock, and the one way a shape's coroutine sends a request (`LoadSender.send_one`, through
`client.send` on the lean `WireClient`). `LoadSender` is the half of `LoadRunner` (bench/load.py) that a client worker
process runs alone; each shape's coroutine is in its module of `bench.shapes`, which names them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from servepack.bench.client import PATHS, StallBound, StreamExchange, request_body, send
from servepack.bench.load_settings import LoadSettings, PointRun
from servepack.bench.prompts import BuiltPrompt, PromptBuilder, Tokenizer
from servepack.bench.shapes import shape_for
from servepack.bench.shapes.agent import reply_text
from servepack.bench.shapes.base import STREAM_GAP_S, PointState, SentRequest
from servepack.bench.wire import WireClient
from servepack.engine.base import Endpoint
from servepack.host.energy import EnergyMeter
from servepack.net import require_loopback

__all__ = ["STREAM_GAP_S", "LoadSender", "PointState", "SentRequest", "reply_text"]


class LoadSender:
    """One endpoint's prompts and the one way a shape's coroutine sends a request (no point runner)."""

    def __init__(self, endpoint: Endpoint, settings: LoadSettings, tokenizer: Tokenizer, *, llama: bool,
                 ignore_eos: bool = True, server_pids: list[int] | None = None,
                 progress: Callable[[str], None] | None = None, energy: EnergyMeter | None = None) -> None:
        self.energy = energy
        self.base_url = require_loopback(endpoint.base_url.rstrip("/"), "the endpoint")
        self.endpoint, self.s, self.tok, self.llama = endpoint, settings, tokenizer, llama
        self.ignore_eos = ignore_eos
        self.builder = PromptBuilder(tokenizer, seed=settings.seed)
        # Prompts built but never sent, shared by the points: a point takes from here first, and what it did not
        # send comes back (still fresh), so no point builds its whole request budget when its duration ends it.
        self.pool: list[BuiltPrompt] = []
        self.per_stream_rps: float | None = None  # closed loop: requests a second a stream sent, last point
        self._built = 0
        self.server_pids = server_pids or []
        self.say = progress or (lambda _: None)
        self.url = f"{self.base_url}{PATHS[settings.endpoint]}"
        self.last: PointRun | None = None

    # -- building ---------------------------------------------------------------------------------------------

    def body_for(self, text: str, *, cache: bool) -> dict[str, Any]:
        """A request's JSON body for `text` (an agent turn replaces its messages)."""
        return request_body(self.s.endpoint, self.endpoint.model, text, self.s.gen_tokens,
                            temperature=self.s.temperature, cache_prompt=cache if self.llama else None,
                            ignore_eos=self.ignore_eos)

    def _budget(self, level: float) -> int:
        return shape_for(self.s.shape).budget(self.s, level)

    def take_prompts(self, n: int) -> list[BuiltPrompt]:
        """`n` prompts: the pool's first, then new ones."""
        out = self.pool[:n]
        del self.pool[:n]
        more = n - len(out)
        out += [self.builder.build(self.s.prompt_tokens) for _ in range(more)]
        self._built += more
        return out

    def encode(self, prompt: BuiltPrompt) -> bytes:
        """A single-shot request's JSON body, encoded before the point's clock starts."""
        return json.dumps(self.body_for(prompt.body, cache=False)).encode()

    # -- sending ----------------------------------------------------------------------------------------------

    async def send_one(self, wire: WireClient, p: PointState, body: dict[str, Any] | bytes,
                       item: SentRequest) -> StreamExchange:
        """Send one request of the point and record it in `p.sent` (with the requests in flight as it went)."""
        p.in_flight += 1
        item.in_flight = p.in_flight
        try:
            ex = await send(wire, self.url, body, self.s.timeout_s, StallBound(floor_s=self.s.stall_floor_s))
        finally:
            p.in_flight -= 1
        item.ex = ex
        p.sent.append(item)
        return ex
