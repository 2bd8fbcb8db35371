"""The sending half of a load point, on one event loop: one endpoint's prompt pool and the request bodies built
before the point's clock, the one way a shape's coroutine sends a request (`LoadSender.send_one`, through
`client.send` on the lean `WireClient`, with the bound `LoadSender.stall_bound` gives), and the one driver of a
point's shape on a running loop (`drive`: the shape's coroutine, stopped early when the caller's `stop` says so).
`LoadSender` is the half of `LoadRunner` (bench/load.py) that a client worker process runs alone; a bench cell's
rounds (bench/runner.py) are points of the `round` shape driven here too. Each shape's coroutine is in its module of
`bench.shapes`, which names them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from servepack.bench.client import PATHS, StallBound, StreamExchange, request_body, send
from servepack.bench.liveness import ServerCheck
from servepack.bench.load_settings import LoadSettings, PointRun
from servepack.bench.prompts import BuiltPrompt, PromptBuilder, Tokenizer
from servepack.bench.shapes import shape_for
from servepack.bench.shapes.agent import reply_text
from servepack.bench.shapes.base import STREAM_GAP_S, PointState, SentRequest
from servepack.bench.wire import WireClient
from servepack.engine.base import Endpoint
from servepack.host.energy import EnergyMeter
from servepack.net import require_loopback

if TYPE_CHECKING:
    import httpx

    from servepack.bench.shapes.base import LoadShape, PointPlan

__all__ = ["STOP_POLL_S", "STREAM_GAP_S", "LoadSender", "PointState", "SentRequest", "drive", "reply_text"]

STOP_POLL_S = 0.1  # how often a running point asks its `stop` (a memory guard) whether to end now


class LoadSender:
    """One endpoint's prompts and the one way a shape's coroutine sends a request (no point runner)."""

    def __init__(self, endpoint: Endpoint, settings: LoadSettings, tokenizer: Tokenizer, *, llama: bool,
                 ignore_eos: bool = True, server_pids: list[int] | None = None,
                 progress: Callable[[str], None] | None = None, energy: EnergyMeter | None = None,
                 cache_prompt: bool = False) -> None:
        self.energy = energy
        self.base_url = require_loopback(endpoint.base_url.rstrip("/"), "the endpoint")
        self.endpoint, self.s, self.tok, self.llama = endpoint, settings, tokenizer, llama
        self.ignore_eos = ignore_eos
        self.cache_prompt = cache_prompt  # a single-shot request asks llama-server to keep its prompt's cache
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
        # The server check a stream past its stall floor asks (bench/liveness.py), while a point runs; without one
        # only the floor (after the first event) and the timeout apply.
        self.server_check: ServerCheck | None = None
        # Asked while a point runs (`drive`): a reason ends the point at once (a memory guard that tripped).
        self.stop: Callable[[], str | None] | None = None

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
        return json.dumps(self.body_for(prompt.body, cache=self.cache_prompt)).encode()

    # -- sending ----------------------------------------------------------------------------------------------

    def stall_bound(self) -> StallBound:
        """The stall bound of the point's next request. A capacity point's has no reference (its requests' waits
        depend on its load): the floor and the server check alone. (A bench cell's sender gives the cell's.)"""
        probe = self.server_check.probe if self.server_check is not None else None
        return StallBound(floor_s=self.s.stall_floor_s, probe=probe, scope="point")

    async def send_one(self, wire: WireClient, p: PointState, body: dict[str, Any] | bytes,
                       item: SentRequest) -> StreamExchange:
        """Send one request of the point and record it in `p.sent` (with the requests in flight as it went)."""
        p.in_flight += 1
        item.in_flight = p.in_flight
        try:
            ex = await send(wire, self.url, body, self.s.timeout_s, self.stall_bound())
        finally:
            p.in_flight -= 1
        item.ex = ex
        p.sent.append(item)
        return ex


async def drive(shape: LoadShape, sender: LoadSender, client: httpx.AsyncClient | None, wire: WireClient,
                p: PointState, streams: int, plan: PointPlan, *, stop: Callable[[], str | None] | None = None
                ) -> str | None:
    """Run one point of `shape` on the running event loop: its coroutine sends `plan` through `sender` until the
    budget or duration ends it. With `stop`, asked every `STOP_POLL_S` while the point runs, a reason it gives ends
    the point at once: requests in flight are cancelled (the finished ones stay in `p.sent`) and the reason is
    returned; None when the point ran to its end."""
    task = asyncio.ensure_future(shape.send(sender, client, wire, p, streams, plan))
    try:
        if stop is None:
            await task
            return None
        while True:
            done, _ = await asyncio.wait({task}, timeout=STOP_POLL_S)
            if done:
                task.result()
                return None
            why = stop()
            if why is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                return why
    finally:
        if not task.done():  # cancelled from outside (Ctrl-C): no request outlives the point
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
