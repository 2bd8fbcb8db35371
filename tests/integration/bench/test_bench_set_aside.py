"""Sampling on a shared host: contended samples are set aside (kept, marked, in no figure) and replaced after the
host is quiet again, and the headline is reached from clean samples alone.

The contention comes and goes through the watch's own seam (`ContentionWatch.reading`), scripted per request, so
the test is deterministic: 3 requests in 10 run in a busy spell, which also slows the fake server 3× (as a
contended host slows llama-server), and the spell outlasts the request by one host check. The real-hog variant is
in test_bench_quality.py and tests/integration/core/test_claims_quality.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from bench_plan import clean_samples
from quiet_host import QuietHost
from servepack.bench.config import BenchSettings
from servepack.bench.runner import run_bench
from servepack.engine.attach import attach
from servepack.host.contention import ContentionWatch, HostReading
from servepack.packs.schema import ClaimsPolicy, Headline
from servepack.records.policy import cell_quality, noisy_reason
from servepack.store import ResultsDir
from servepack.testing import Script, ScriptedServer

BUSY = {3, 6, 9}  # generation requests (from 1) that run in a busy spell: 30% of them
QUIET_ITL, BUSY_ITL = 0.02, 0.06
CLAIMS = ClaimsPolicy(headline=Headline(metric="decode_tok_s", preset="p", context_tokens=120, gen_tokens=12),
                      interval_target_pct=25.0)


class ComesAndGoes(ContentionWatch):
    """A request's window is contended when the server was serving a BUSY request; after one, the next host check
    (the wait for quiet) is still busy, the one after quiet."""

    def __init__(self, script: Script, busy: set[int]) -> None:
        super().__init__(reader=QuietHost())
        self.script, self.busy = script, busy
        self.linger = 0
        self.checks: list[bool] = []

    def reading(self, t0: float, t1: float | None = None, *, record: bool = True) -> HostReading:
        if record:
            busy = self.script.generations in self.busy
            self.linger = 1 if busy else 0
        else:
            busy = self.linger > 0
            self.linger = max(0, self.linger - 1)
            self.checks.append(busy)
        r = HostReading(window_s=round((t1 or time.time()) - t0, 3), others_cores=0.1 if busy else 0.0,
                        others_share=0.05 if busy else 0.0, own_cores=1.0, steal_pct=25.0 if busy else 1.0,
                        load1=2.5 if busy else 0.1, contended=busy, reason="steal 25%" if busy else None)
        if record:
            with self._lock:
                self._readings.append(r)
        return r


def _lines(results: ResultsDir) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in results.file("requests.jsonl").read_text().splitlines()]


def _bench(tmp_path: Path, busy: set[int] = BUSY, **kw: Any
           ) -> tuple[Any, list[dict[str, Any]], ComesAndGoes, list[str]]:
    script = Script(ttft_s=0.03, itl_s=QUIET_ITL, itl_for=lambda g: BUSY_ITL if g in busy else QUIET_ITL)
    results = ResultsDir(tmp_path / "r")
    watch = ComesAndGoes(script, busy)
    said: list[str] = []
    settings = BenchSettings(**{"context_marks": (120,), "gen_tokens": 12, "samples": 5, "max_samples": 10,
                                "interval_target_pct": 25.0, "timeout_s": 30.0, **kw})
    with ScriptedServer(script) as srv:
        s = run_bench(attach(srv.base_url, "m"), settings, results, watch=watch, progress=said.append)
    return s, _lines(results), watch, said


def test_contended_samples_are_set_aside_and_replaced_and_the_headline_is_all_clean(tmp_path: Path) -> None:
    s, lines, watch, said = _bench(tmp_path)
    # requests 1-2 clean, 3 busy, 4-5 clean, 6 busy, 7 clean: five clean ones meet the ±25% target
    assert [ln["contended"] for ln in lines] == [False, False, True, False, False, True, False]
    aside = [ln for ln in lines if ln["set_aside"] is not None]
    assert [ln["round"] for ln in aside] == [2, 5]
    assert all(ln["set_aside"] == "host contended: steal 25%" and ln["ok"] for ln in aside)
    # each busy sample was followed by waiting out its spell: one busy host check, then a quiet one (the last
    # reading is the whole bench phase's, for the summary)
    assert watch.checks == [True, False, True, False, False]
    assert sum("host contended; waited" in x for x in said) == 2
    cell = s.cells[0]
    assert (cell.n, cell.n_clean, cell.n_set_aside, cell.contended) == (7, 5, 2, 2)
    assert cell.set_aside_why == ["2 host contended: steal 25%"]
    assert cell.interval is not None and cell.interval.met and cell.interval.stopped_by == "target met"
    # the headline's samples are all clean: the figures count five, and no slow (busy) value is among them
    stat = cell.decode_tok_s_server
    assert stat.n == 5 and stat.min is not None and stat.min > 40  # quiet: ~50 tok/s; busy: ~17 tok/s
    assert max(ln["decode_tok_s_server"] for ln in aside) < 20
    assert cell_quality(cell, CLAIMS) == [] and noisy_reason(s, CLAIMS) is None
    assert s.all_fresh and s.host is not None and s.host.samples_contended == 2


def test_a_cell_whose_samples_are_all_contended_is_not_claim_grade(tmp_path: Path) -> None:
    """A host busy throughout: the figures fall back to the contended samples, labelled; never claim-grade."""
    s, lines, _, _ = _bench(tmp_path, busy=set(range(1, 100)), samples=2, max_samples=2)
    # a fixed count of 2 and a budget of 3×: six rounds, all contended, all set aside
    assert len(lines) == 6 and all(ln["set_aside"] for ln in lines)
    cell = s.cells[0]
    assert cell.n_clean == 0 and cell.figures_contended and cell.decode_tok_s_server.n == 6
    assert cell.interval is not None and cell.interval.stopped_by == "sample budget"
    assert cell_quality(cell, CLAIMS) == ["no clean sample: the figures are from contended ones; 6 of 6 samples "
                                          "set aside (6 host contended: steal 25%)"]
    # Wrong answer: an interval that happens to be tight must not make contended figures claim-grade
    assert cell.interval.met
    assert noisy_reason(s, CLAIMS) is not None


def test_the_e2e_sample_check_reads_the_bench_as_it_sets_samples_aside(tmp_path: Path) -> None:
    """tests/bench_plan.py, which e2e tests of real runs use in place of exact counts, against runs whose set-aside
    samples are scripted: it accepts what the bench writes, and a wrong answer fails it."""
    # a fixed count of 3, request 2 in a busy spell: 4 measured, 3 clean, 1 set aside and replaced
    s, lines, _, _ = _bench(tmp_path / "one", busy={2}, samples=3, max_samples=3)
    cell = s.cells[0].model_dump()
    clean = clean_samples(cell, lines, plan=3)
    assert [ln["round"] for ln in clean] == [0, 2, 3] and cell["n"] == 4

    def wrong(c: dict[str, Any], ls: list[dict[str, Any]], plan: int = 3) -> None:
        with pytest.raises(AssertionError):
            clean_samples(c, ls, plan)

    aside = next(i for i, ln in enumerate(lines) if ln["set_aside"])
    wrong(cell, [dict(ln, set_aside=None) if i == aside else ln for i, ln in enumerate(lines)])  # left unmarked
    wrong(cell, [dict(ln, set_aside="  ") if i == aside else ln for i, ln in enumerate(lines)])  # marked, no reason
    wrong(cell, [dict(ln, set_aside="host contended: x", contended=False) if i == 0 else ln
                 for i, ln in enumerate(lines)])  # set aside though neither stalled nor contended
    wrong(dict(cell, n=3), lines)  # the cell's counts are not its samples'
    wrong(cell, lines, plan=4)  # short of the plan, and the cell stopped at its fixed count: no reason to be short
    extra = [dict(lines[aside], round=r) for r in range(4, 10)]
    wrong(dict(cell, n=10, n_set_aside=7), lines + extra)  # past the 3x budget
    # a host busy throughout the budget: no clean sample is no answer
    s, lines, _, _ = _bench(tmp_path / "all", busy=set(range(1, 100)), samples=2, max_samples=2)
    wrong(s.cells[0].model_dump(), lines, plan=2)
    # busy for all but the last round of the budget: one clean sample, the cell saying it spent its budget
    s, lines, _, _ = _bench(tmp_path / "last", busy={1, 2, 3, 4, 5}, samples=2, max_samples=2)
    assert len(clean_samples(s.cells[0].model_dump(), lines, plan=2)) == 1 and len(lines) == 6
