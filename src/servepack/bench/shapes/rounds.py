"""round: `level` requests sent together, one a stream, each at its start slot (`start_slot`); the point ends when
the last one has answered. A `servepack bench` cell is rounds of this shape (bench/runner.py): its requests are sent
and stall-checked by the same sender and point driver as a capacity point's. It is not a `--shape` of capacity (one
request a stream loads the server for one round, not for a duration), so it is not in `SHAPES`."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from servepack.bench.client import StreamExchange
from servepack.bench.prompts import BuiltPrompt
from servepack.bench.shapes.base import PointPlan, PointState, Sender, SentRequest, ShapeDefaults, start_slot

if TYPE_CHECKING:
    import httpx

    from servepack.bench.wire import WireClient


class RoundShape(ShapeDefaults):
    """Every stream sends one request, staggered by the start slots; nothing is sent after them."""

    name = "round"
    help = "N requests together, once (a bench cell's round)"
    unit = "streams"
    counts_streams = True
    scheduled = False
    warm = False
    spreads = False

    def budget(self, settings: object, level: float) -> int:
        return max(1, int(level))

    def plan(self, sender: Sender, index: int, level: float, budget: int, streams: int) -> PointPlan:
        prompts = sender.take_prompts(streams)
        return PointPlan(prompts=prompts, bodies=[sender.encode(x) for x in prompts])

    async def send(self, sender: Sender, client: httpx.AsyncClient | None, wire: WireClient, p: PointState,
                   streams: int, plan: PointPlan) -> None:
        async def stream(k: int) -> None:
            ready = await start_slot(p, k, streams)
            if not p.take():
                return
            prompt = plan.prompts[k]
            p.used += 1
            await sender.send_one(wire, p, plan.bodies[k],
                                  SentRequest(StreamExchange(0.0), prompt.endpoint_tokens, prompt.exact, prompt.nonce,
                                              k, 0, scheduled_s=ready))

        await asyncio.gather(*(stream(k) for k in range(min(streams, len(plan.prompts)))))

    def unsent(self, prompts: list[BuiltPrompt], used: int, issued: int) -> list[BuiltPrompt]:
        return prompts[issued:]


ROUND = RoundShape()
