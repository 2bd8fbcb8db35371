"""What a bench cell's sample counts mean, for tests of real runs on a host others may be loading.

A measured sample spoiled by the host's contention or by a stall is kept in requests.jsonl, marked with why
(`set_aside`), and replaced (issue 23): so a cell may record more samples than the plan, and on a host busy for
long enough its set-aside budget (3 × the plan) or its time may run out before the plan's clean samples are in.
The counts are then not fixed, but what they mean is; this checks that, strictly enough that a wrong answer fails:
no clean sample, a spoiled sample not set aside, a set-aside one without a reason, more than the budget, a cell
short of its plan without saying why, or a cell whose counts disagree with its samples.

A capacity point of closed load (`closed_point`) is bounded the same way: its streams send until the point's request
budget or its duration is spent, so a host slow enough to spend the duration first sends fewer; what the count means
is checked instead of the budget: each stream sent, never past the budget, short of it only once the duration was
over, every request answered on a fresh prompt.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

BUDGET = 3.0  # BenchSettings.sample_budget's default
SHORT_STOPS = ("sample budget", "max time")  # the stops that may leave a cell short of its plan


def clean_samples(cell: Mapping[str, Any], samples: Sequence[Mapping[str, Any]], plan: int, *,
                  budget: float = BUDGET) -> list[dict[str, Any]]:
    """Check one cell (a server_bench.json cell, or `Cell.model_dump()`) against its requests.jsonl samples
    (that cell's; warmups are skipped) and its plan (rounds); returns the clean samples, the ones behind its figures.
    Concurrency 1 only: a round of several requests may keep some and set others aside, so its bounds differ.
    """
    conc = int(cell["concurrency"])
    assert conc == 1, "clean_samples checks cells of concurrency 1"
    measured = [dict(s) for s in samples if not s.get("warmup")]
    clean = [s for s in measured if not s.get("set_aside")]
    aside = [s for s in measured if s.get("set_aside")]
    # every sample set aside says why, and is a stalled or a contended one: nothing else is set aside
    for s in aside:
        assert isinstance(s["set_aside"], str) and s["set_aside"].strip(), s
        assert s.get("stalled") or (s.get("contended") and s["set_aside"].startswith("host contended")), s
    # a spoiled sample is never left among the clean ones, and a clean one answered in full
    for s in clean:
        assert not s.get("stalled") and not s.get("contended"), s
        assert s["ok"], s.get("failure")
    most, rounds_budget = plan, max(plan, math.ceil(plan * budget))
    assert 1 <= len(clean) <= most, (len(clean), most, [s["set_aside"] for s in aside])
    assert len(measured) <= rounds_budget, (len(measured), rounds_budget)
    stop = (cell.get("interval") or {}).get("stopped_by")
    if len(clean) < most:
        # short of the plan only when samples were set aside and the budget or the cell's time ran out
        assert aside and stop in SHORT_STOPS, (len(clean), most, stop, [s["set_aside"] for s in aside])
        if stop == "sample budget":
            assert len(measured) == rounds_budget, (len(measured), rounds_budget)
    # the cell's counts are its samples'
    assert (cell["n"], cell["n_clean"], cell["n_set_aside"]) == (len(measured), len(clean), len(aside)), cell
    return clean


def run_cell(run: Path, context_tokens: int, plan: int, *, budget: float = BUDGET) -> list[dict[str, Any]]:
    """`clean_samples` for the concurrency-1 cell at `context_tokens` of a run directory (server_bench.json and
    requests.jsonl): its clean samples."""
    cells = [c for c in json.loads((run / "server_bench.json").read_text())["cells"]
             if (c["context_tokens"], c["concurrency"]) == (context_tokens, 1)]
    assert len(cells) == 1, cells
    samples = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines()]
    mine = [s for s in samples if (s["context_tokens"], s["concurrency"]) == (context_tokens, 1)]
    return clean_samples(cells[0], mine, plan, budget=budget)


DURATION_SLACK_S = 0.05  # the point's wall clock (time.time) against its deadline (perf_counter): two clocks


def closed_point(point: Mapping[str, Any], *, level: int, budget: int, duration_s: float) -> int:
    """Check one closed-load capacity point (`PointStats.model_dump()`, or a capacity_points.jsonl line) sent at
    `level` streams with `budget` requests (LoadSettings.max_requests) and `duration_s`; returns its request count.

    Wrong answers it fails: a stream that never sent, a request past the budget, a point short of its budget before
    its duration was over, a request not answered or not on a fresh prompt, a dropped or stopped point."""
    n = int(point["n"])
    assert point["shape"] == "closed" and point["level"] == level, (point["shape"], point["level"], level)
    assert point["stopped"] is None and point["n_dropped"] == 0, (point["stopped"], point["n_dropped"])
    # every stream sends its first request at the point's start; none is sent once the budget is spent
    assert min(level, budget) <= n <= budget, (n, level, budget)
    if n < budget:  # the duration, not the budget, ended it: the point ran its whole duration
        assert point["wall_s"] >= duration_s - DURATION_SLACK_S, (n, budget, point["wall_s"], duration_s)
    assert point["n_ok"] == n, point["failures"]  # every request answered
    assert point["n_fresh"] == n and point["n_warm"] == 0, (point["n_fresh"], point["n_warm"], n)  # no prefix reused
    return n
