"""The load-shape plug point: a toy shape added as one class and one table line (`bench.shapes.SHAPES`) is checked by
`LoadSettings`, runs its points through `LoadRunner.run_point` and is swept by `run_capacity` over real HTTP to the
shared fake server, with its own unit in every line; a name the table lacks is refused, as before."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from servepack.bench.capacity import parse_slo
from servepack.bench.client import StreamExchange
from servepack.bench.load import LoadRunner, LoadSettings
from servepack.bench.prompts import BuiltPrompt, ServerTokenizer
from servepack.bench.shapes import SHAPES, LoadShape
from servepack.bench.shapes.base import PointPlan, PointState, Sender, SentRequest, ShapeSettings
from servepack.bench.sweep import run_capacity
from servepack.bench.wire import WireClient
from servepack.engine.attach import attach
from servepack.store import ResultsDir
from servepack.testing import Script, ScriptedServer


class BurstShape:
    """'burst': a point at level N sends N requests in one instant, one each, and nothing more."""

    name = "burst"
    help = "N requests at once"
    unit = "requests at once"
    counts_streams = True
    scheduled = False
    warm = False
    spreads = False

    def __init__(self) -> None:
        self.sent_points: list[int] = []

    def check(self, settings: ShapeSettings) -> str | None:
        return "a burst is sent from one process: drop --client-workers" if settings.workers > 1 else None

    def budget(self, settings: ShapeSettings, level: float) -> int:
        return min(settings.max_requests, max(1, int(level)))

    def width(self, level: float, streams: int) -> int:
        return streams

    def plan(self, sender: Sender, index: int, level: float, budget: int, streams: int) -> PointPlan:
        prompts = sender.take_prompts(budget)
        return PointPlan(prompts=prompts, bodies=[sender.encode(x) for x in prompts])

    async def send(self, sender: Sender, client: httpx.AsyncClient | None, wire: WireClient, p: PointState,
                   streams: int, plan: PointPlan) -> None:
        async def one(k: int, prompt: BuiltPrompt, body: bytes) -> None:
            if p.take():
                await sender.send_one(wire, p, body, SentRequest(StreamExchange(0.0), prompt.endpoint_tokens,
                                                                 prompt.exact, prompt.nonce, k, 0, scheduled_s=0.0))

        self.sent_points.append(len(plan.prompts))
        await asyncio.gather(*(one(k, x, b) for k, (x, b) in enumerate(zip(plan.prompts, plan.bodies, strict=True))))

    def unsent(self, prompts: list[BuiltPrompt], used: int, issued: int) -> list[BuiltPrompt]:
        return prompts[issued:]

    def learn(self, sender: Sender, requests: int, wall_s: float, streams: int) -> None:
        return None


@pytest.fixture()
def burst(monkeypatch: pytest.MonkeyPatch) -> Iterator[BurstShape]:
    shape = BurstShape()
    monkeypatch.setitem(SHAPES, "burst", shape)  # the one table line
    yield shape


def _settings(**kw: Any) -> LoadSettings:
    base: dict[str, Any] = {"shape": "burst", "prompt_tokens": 30, "gen_tokens": 4, "max_requests": 12,
                            "duration_s": 20.0, "timeout_s": 10.0, "client_lag_bound_ms": 1000.0}
    return LoadSettings(**{**base, **kw})


def test_a_shape_the_table_lacks_is_refused_and_the_toys_own_check_is_asked(burst: BurstShape,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert _settings().shape == "burst"
    with pytest.raises(ValidationError, match="a burst is sent from one process: drop --client-workers"):
        _settings(workers=2)
    with pytest.raises(ValidationError, match="agent sessions are chat conversations"):  # the others' checks hold
        _settings(shape="agent", endpoint="completion")
    monkeypatch.delitem(SHAPES, "burst")
    with pytest.raises(ValidationError, match="Input should be 'closed', 'open' or 'agent'"):
        _settings()


def test_a_toy_shape_runs_points_through_the_runner(burst: BurstShape) -> None:
    with ScriptedServer(Script(queue=True, slots=2, ttft_s=0.05, itl_s=0.01)) as srv, \
            httpx.Client(timeout=10.0) as sync:
        runner = LoadRunner(attach(srv.base_url, "m"), _settings(), ServerTokenizer(sync, srv.base_url, "chat"),
                            llama=True)
        first = runner.run_point(0, 3)
        second = runner.run_point(1, 2)
        served = srv.script.busy_max
    assert burst.sent_points == [3, 2]
    assert [len(first.samples), len(second.samples)] == [3, 2]
    assert all(s.ok and s.fresh and s.shape == "burst" and s.scheduled_s == 0.0 for s in first.samples)
    assert {s.concurrency for s in first.samples} == {3} and {s.concurrency for s in second.samples} == {2}
    assert all(s.lateness_ms is None and not s.warm for s in first.samples)  # not scheduled, not warm
    assert sorted(s.in_flight for s in first.samples) == [1, 2, 3]  # sent in one instant
    assert served == 2  # the fake's 2 slots; the third waited in its queue
    nonces = [s.nonce for s in first.samples + second.samples]
    assert len(set(nonces)) == 5 and runner.pool == []  # every prompt fresh, none left over
    assert first.rate_requested is None  # rates are a scheduled shape's


def test_a_toy_shape_is_swept_to_its_knee_in_its_own_unit(burst: BurstShape, tmp_path: Path) -> None:
    # 2 slots; a request takes 0.1 s to its first token and 3 × 0.05 s of decode: a third one at once waits ~0.25 s.
    results = ResultsDir(tmp_path / "r")
    lines: list[str] = []
    with ScriptedServer(Script(queue=True, slots=2, ttft_s=0.1, itl_s=0.05)) as srv:
        r = run_capacity(attach(srv.base_url, "m"), _settings(), [parse_slo("ttft_p90=250ms")], results,
                         max_level=4, progress=lines.append, repeat_check=False)
    assert r.status == "complete" and r.settings.shape == "burst" and r.level_unit == "requests at once"
    assert [p.level for p in r.points] == [1, 2, 4, 3]  # whole levels: the shape counts streams
    assert r.best_level == 2 and r.first_fail_level == 3 and r.knee.level == 2, r.knee.reason
    assert [p.over_slots is not None for p in r.points] == [False, False, True, True]
    assert any(line.startswith("4 requests at once is above the server's 2 slots") for line in lines), lines
    assert r.claim_grade and r.figures.startswith("fresh")  # not warm
    doc = json.loads(results.file("capacity.json").read_text())
    assert doc["settings"]["shape"] == "burst" and doc["level_unit"] == "requests at once"
    reqs = [json.loads(x) for x in results.file("capacity_requests.jsonl").read_text().splitlines()]
    assert len(reqs) == 1 + 2 + 4 + 3 and {x["shape"] for x in reqs} == {"burst"}


def test_the_table_entries_satisfy_the_protocol() -> None:
    shapes: list[LoadShape] = [*SHAPES.values(), BurstShape()]  # mypy checks each against the Protocol
    assert [s.name for s in shapes] == ["closed", "open", "agent", "burst"]
