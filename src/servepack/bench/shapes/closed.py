"""closed: `level` streams; each sends its next request when its previous one ends, until the point's request budget
is spent or its duration is over (no new send after it; requests in flight finish). Streams start staggered by
`STREAM_GAP_S` (their start slots)."""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING

from servepack.bench.client import StreamExchange
from servepack.bench.prompts import BuiltPrompt
from servepack.bench.shapes.base import PointPlan, PointState, Sender, SentRequest, ShapeDefaults, start_slot

if TYPE_CHECKING:
    import httpx

    from servepack.bench.wire import WireClient


class ClosedShape(ShapeDefaults):
    """Streams back to back: a request goes out when its stream's previous one ended."""

    name = "closed"
    help = "N streams back to back"
    unit = "streams"
    counts_streams = True
    scheduled = False
    warm = False
    spreads = True

    def plan(self, sender: Sender, index: int, level: float, budget: int, streams: int) -> PointPlan:
        prompts = sender.take_prompts(self.need(sender, streams, budget))
        return PointPlan(prompts=prompts, bodies=[sender.encode(x) for x in prompts])

    @staticmethod
    def need(sender: Sender, level: int, budget: int) -> int:
        """Prompts a closed point needs before its clock: its budget, or (after a first point) what the last point's
        per-stream rate says this one can send in its duration, with a margin; more are built if it runs short."""
        if sender.per_stream_rps is None:
            return budget
        est = math.ceil(sender.per_stream_rps * level * sender.s.duration_s * 1.3) + 2 * level
        return max(1, min(budget, est))

    async def send(self, sender: Sender, client: httpx.AsyncClient | None, wire: WireClient, p: PointState,
                   streams: int, plan: PointPlan) -> None:
        prompts, bodies = plan.prompts, plan.bodies
        lock = asyncio.Lock()

        async def next_prompt() -> tuple[BuiltPrompt, bytes]:
            i = p.used
            p.used += 1
            while i >= len(prompts):
                # Ran short of prompts built before the clock: build a stream's worth more off the event loop
                # (the wait shows in this request's launch lag, as it should).
                async with lock:
                    if i >= len(prompts):
                        more = await asyncio.to_thread(sender.take_prompts, max(streams, 8))
                        p.built_during += len(more)
                        prompts.extend(more)
                        bodies.extend(sender.encode(x) for x in more)
            return prompts[i], bodies[i]

        async def stream(k: int) -> None:
            ready = await start_slot(p, k, streams)
            while p.take():
                prompt, body = await next_prompt()
                await sender.send_one(wire, p, body,
                                      SentRequest(StreamExchange(0.0), prompt.endpoint_tokens, prompt.exact,
                                                  prompt.nonce, k, 0, scheduled_s=ready))
                ready = time.perf_counter() - p.t0

        await asyncio.gather(*(stream(k) for k in (plan.ids if plan.ids is not None else range(streams))))

    def unsent(self, prompts: list[BuiltPrompt], used: int, issued: int) -> list[BuiltPrompt]:
        return prompts[used:]

    def learn(self, sender: Sender, requests: int, wall_s: float, streams: int) -> None:
        if wall_s > 0 and requests:
            sender.per_stream_rps = requests / wall_s / streams
