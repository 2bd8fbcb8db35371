"""open: arrivals at `level` requests a second, constant or Poisson (seeded), scheduled on absolute times from the
point's start, so a late wake-up never shifts the arrivals after it; the achieved rate is measured from the send
times. At most `max_in_flight` requests are in flight; an arrival beyond that is recorded as dropped."""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import TYPE_CHECKING

from servepack.bench.client import StreamExchange
from servepack.bench.prompts import BuiltPrompt
from servepack.bench.shapes.base import (
    Arrivals,
    PointPlan,
    PointState,
    Sender,
    SentRequest,
    ShapeDefaults,
    ShapeSettings,
)

if TYPE_CHECKING:
    import httpx

    from servepack.bench.wire import WireClient


def arrival_offsets(rate: float, n: int, arrivals: Arrivals, seed: int) -> list[float]:
    """Planned send times (seconds from the start) of `n` arrivals at `rate` a second; the first at 0."""
    if rate <= 0 or n <= 0:
        return []
    if arrivals == "constant":
        return [i / rate for i in range(n)]
    rng = random.Random(seed)
    out, t = [0.0], 0.0
    for _ in range(n - 1):
        t += rng.expovariate(rate)
        out.append(t)
    return out


class OpenShape(ShapeDefaults):
    """Arrivals on a schedule, whether or not earlier requests have ended."""

    name = "open"
    help = "arrivals at a rate"
    unit = "requests/s"
    counts_streams = False
    scheduled = True
    warm = False
    spreads = True

    def budget(self, settings: ShapeSettings, level: float) -> int:
        return max(1, min(settings.max_requests, math.ceil(level * settings.duration_s)))

    def width(self, level: float, streams: int) -> int:
        return max(2, math.ceil(level))  # a second's arrivals

    def plan(self, sender: Sender, index: int, level: float, budget: int, streams: int) -> PointPlan:
        s = sender.s
        offsets = arrival_offsets(level, budget, s.arrivals, s.seed + index)
        prompts = sender.take_prompts(sum(1 for o in offsets if o < s.duration_s))
        return PointPlan(prompts=prompts, bodies=[sender.encode(x) for x in prompts], offsets=offsets)

    async def send(self, sender: Sender, client: httpx.AsyncClient | None, wire: WireClient, p: PointState,
                   streams: int, plan: PointPlan) -> None:
        tasks: list[asyncio.Future[StreamExchange]] = []
        try:
            await self._arrive(sender, wire, p, plan, tasks)
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            # Stopped (Ctrl-C, a spread point told to stop): no request is left running past the point's client.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    @staticmethod
    async def _arrive(sender: Sender, wire: WireClient, p: PointState, plan: PointPlan,
                      tasks: list[asyncio.Future[StreamExchange]]) -> None:
        """Send each arrival at its offset (a task each, into `tasks`)."""
        s, ids = sender.s, plan.ids
        for j, (off, prompt, body) in enumerate(zip(plan.offsets, plan.prompts, plan.bodies, strict=False)):
            i = ids[j] if ids is not None else j
            if off >= s.duration_s:
                break
            delay = p.t0 + off - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            p.issued += 1
            item = SentRequest(StreamExchange(time.time()), prompt.endpoint_tokens, prompt.exact, prompt.nonce, i,
                               p.in_flight, scheduled_s=off)
            if p.in_flight >= s.max_in_flight:
                item.dropped = True
                item.ex.error = f"dropped: {p.in_flight} requests in flight (the bound)"
                item.ex.end_s = 0.0
                p.sent.append(item)
                continue
            tasks.append(asyncio.ensure_future(sender.send_one(wire, p, body, item)))

    def unsent(self, prompts: list[BuiltPrompt], used: int, issued: int) -> list[BuiltPrompt]:
        return prompts[issued:]
