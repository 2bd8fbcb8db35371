"""tests/bench_plan.py `closed_point`, which the capacity e2e test uses in place of an exact request count, against
closed-load points of the scripted fake server: a point ended by its budget and one ended by its duration are read as
they are, and each wrong answer fails it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from bench_plan import closed_point
from servepack.bench.capacity import parse_slo, point_stats
from servepack.bench.load import LoadRunner, LoadSettings
from servepack.bench.prompts import ServerTokenizer
from servepack.engine.attach import attach
from servepack.testing import Script, ScriptedServer


def _point(level: int, **kw: Any) -> tuple[dict[str, Any], LoadSettings]:
    settings = LoadSettings(**{"prompt_tokens": 30, "gen_tokens": 6, "timeout_s": 10.0, **kw})
    with ScriptedServer(Script(queue=True, slots=4, ttft_s=0.01, itl_s=0.01)) as srv, \
            httpx.Client(timeout=10.0) as sync:
        runner = LoadRunner(attach(srv.base_url, "m"), settings, ServerTokenizer(sync, srv.base_url, "chat"),
                            llama=True)
        run = runner.run_point(0, level)
    stats = point_stats(0, level, run.samples, run.wall_s, [parse_slo("ttft_p90=60s")], shape="closed")
    return stats.model_dump(), settings


def _wrong(point: dict[str, Any], level: int, budget: int, duration_s: float) -> None:
    with pytest.raises(AssertionError):
        closed_point(point, level=level, budget=budget, duration_s=duration_s)


def test_a_point_ended_by_its_budget() -> None:
    point, s = _point(2, max_requests=4, duration_s=60.0)
    assert closed_point(point, level=2, budget=4, duration_s=60.0) == 4
    assert point["wall_s"] < s.duration_s  # the budget, not the duration, ended it
    _wrong(point, 2, 3, 60.0)  # past the budget
    _wrong(point, 2, 8, 60.0)  # short of the budget while the duration was not over
    _wrong(point, 1, 4, 60.0)  # not the level it was sent at
    _wrong(dict(point, n_ok=3, failures=["timeout"]), 2, 4, 60.0)  # a request not answered
    _wrong(dict(point, n_fresh=3), 2, 4, 60.0)  # a prompt the server had seen
    _wrong(dict(point, n_warm=1), 2, 4, 60.0)
    _wrong(dict(point, stopped="interrupted (Ctrl-C)"), 2, 4, 60.0)
    _wrong(dict(point, n_dropped=1), 2, 4, 60.0)
    # a stream that never sent, though the point ran its whole duration
    _wrong(dict(point, n=1, n_ok=1, n_fresh=1, wall_s=61.0), 2, 4, 60.0)


def test_a_point_ended_by_its_duration() -> None:
    point, _ = _point(2, max_requests=200, duration_s=0.5)
    n = closed_point(point, level=2, budget=200, duration_s=0.5)
    assert 2 <= n < 200 and point["wall_s"] >= 0.5 - 0.05
    # the same count read as if the point had been cut before its duration was over
    _wrong(dict(point, wall_s=0.2), 2, 200, 0.5)
