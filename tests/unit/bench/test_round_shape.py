"""The one point driver (`load_shapes.drive`) and the `round` shape a bench cell's rounds are points of: one request
a stream, each at its start slot; a `stop` reason cancels what is in flight and keeps what finished."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from servepack.bench.client import StallBound, StreamExchange
from servepack.bench.load_shapes import LoadSender, drive
from servepack.bench.prompts import BuiltPrompt
from servepack.bench.shapes import SHAPES
from servepack.bench.shapes.base import PointPlan, PointState, SentRequest, slot_offset
from servepack.bench.shapes.rounds import ROUND


class ToySender:
    """Answers each request after `delay_s` (0: at once), recording when it was sent."""

    base_url = "http://127.0.0.1:9"
    per_stream_rps: float | None = None

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.sent_at: dict[int, float] = {}

    async def send_one(self, wire: Any, p: PointState, body: Any, item: SentRequest) -> StreamExchange:
        self.sent_at[item.stream] = time.perf_counter() - p.t0
        await asyncio.sleep(self.delay_s)
        item.ex = StreamExchange(t_sent_unix=time.time(), status=200)
        p.sent.append(item)
        return item.ex


def _plan(n: int) -> PointPlan:
    prompts = [BuiltPrompt(body=f"p{k}", nonce=f"n{k}", target_tokens=10, endpoint_tokens=10, exact=True,
                           first_passage=0) for k in range(n)]
    return PointPlan(prompts=prompts, bodies=[b"{}"] * n)


def _point(n: int) -> PointState:
    return PointState(t0=time.perf_counter(), deadline=math.inf, budget=n, t0_unix=time.time())


def test_a_round_sends_one_request_a_stream_at_its_slot_even_when_answers_come_at_once() -> None:
    # A closed point with budget n could let a stream whose answer came first take another stream's request; a
    # round never does: stream k sends prompt k once.
    sender, p = ToySender(0.0), _point(12)
    why = asyncio.run(drive(ROUND, sender, None, None, p, 12, _plan(12)))  # type: ignore[arg-type]
    assert why is None
    assert sorted(x.stream for x in p.sent) == list(range(12)) and p.issued == 12 == p.used
    assert [x.nonce for x in sorted(p.sent, key=lambda x: x.stream)] == [f"n{k}" for k in range(12)]
    for k, at in sender.sent_at.items():
        assert at >= slot_offset(k, 12) - 1e-4, (k, at)  # never before its start slot
    assert ROUND.unsent(_plan(12).prompts, p.used, p.issued) == []


def test_a_stop_reason_cancels_the_requests_in_flight_and_keeps_the_finished() -> None:
    sender, p = ToySender(30.0), _point(4)
    asked = []

    def stop() -> str | None:
        asked.append(time.perf_counter())
        return "guard min_available_ram_gb: 0.50 GiB < 1 GiB" if len(asked) >= 2 else None

    t0 = time.perf_counter()
    why = asyncio.run(drive(ROUND, sender, None, None, p, 4, _plan(4), stop=stop))  # type: ignore[arg-type]
    assert why == "guard min_available_ram_gb: 0.50 GiB < 1 GiB"
    assert p.sent == [] and len(sender.sent_at) == 4  # all four went out; none of the 30 s answers came
    assert time.perf_counter() - t0 < 25  # cancelled, not waited out
    assert len(asked) == 2


def test_without_stop_the_driver_waits_for_the_shape() -> None:
    sender, p = ToySender(0.05), _point(3)
    assert asyncio.run(drive(ROUND, sender, None, None, p, 3, _plan(3))) is None  # type: ignore[arg-type]
    assert len(p.sent) == 3


def test_round_is_no_capacity_shape_and_the_cell_sender_gives_the_cells_bound() -> None:
    from servepack.bench.load import LoadSettings
    from servepack.bench.prompts import EstimateTokenizer
    from servepack.bench.runner import _CellSender
    from servepack.engine.base import Endpoint

    assert "round" not in SHAPES  # `--shape round` is refused: one request a stream is no sustained load
    ep = Endpoint(base_url="http://127.0.0.1:9", model="m", launched=False)
    settings = LoadSettings(stall_floor_s=7.0)
    plain = LoadSender(ep, settings, EstimateTokenizer(), llama=True)
    assert plain.stall_bound() == StallBound(floor_s=7.0) and plain.stall_bound().scope == "point"
    cell = _CellSender(ep, settings, EstimateTokenizer(), llama=True)
    assert cell.stall_bound().scope == "point"  # no round yet: the point's bound
    cell.bound = StallBound(floor_s=5.0, gap_ref_s=0.02, first_ref_s=0.3)
    assert cell.stall_bound() is cell.bound
