"""Measurement quality against the shared fake server: stalls cut by inactivity, sequential sampling, and samples
taken beside a real CPU hog marked contended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servepack.bench.config import BenchSettings
from servepack.bench.runner import run_bench
from servepack.engine.attach import attach
from servepack.host.contention import ContentionWatch, ExcludeSet
from servepack.packs.schema import ClaimsPolicy, Headline
from servepack.records.policy import noisy_reason
from servepack.store import ResultsDir
from servepack.testing import Script, ScriptedServer
from servepack.testing.processes import cpu_hog as hog
from servepack.testing.processes import fake_server_process

CLAIMS = ClaimsPolicy(headline=Headline(metric="decode_tok_s", preset="p", context_tokens=120, gen_tokens=12))


def _settings(**kw: Any) -> BenchSettings:
    base: dict[str, Any] = {"context_marks": (120,), "gen_tokens": 12, "samples": 2, "timeout_s": 30.0}
    return BenchSettings(**{**base, **kw})


def _lines(results: ResultsDir) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in results.file("requests.jsonl").read_text().splitlines()]


def test_a_stalled_stream_is_cut_by_inactivity_and_recorded_stalled(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path / "r")
    script = Script(ttft_s=0.03, itl_s=0.02, modes=deque(["ok", "ok", "stall", "ok"]))
    t0 = time.monotonic()
    with ScriptedServer(script) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(samples=4, stall_floor_s=1.0), results)
    wall = time.monotonic() - t0
    assert wall < 15, "a stall must not be waited on for the 30 s per-request timeout"
    lines = _lines(results)
    stalled = [ln for ln in lines if ln["stalled"]]
    assert len(stalled) == 1 and stalled[0]["round"] == 2 and not stalled[0]["ok"]
    assert stalled[0]["failure"].startswith("stalled: no byte for 1.")
    assert "bound 1.0 s = max(floor 1 s, 10 × p90 gap" in stalled[0]["failure"]
    assert stalled[0]["stall_bound_s"] == 1.0
    # the stalled round is set aside and replaced: four clean rounds, as planned
    assert [ln["stalled"] for ln in lines] == [False, False, True, False, False]
    assert [ln["set_aside"] is not None for ln in lines] == [False, False, True, False, False]
    cell = s.cells[0]
    assert cell.stalls == 1 and cell.n == 5 and cell.n_ok == 4 and cell.n_clean == 4 and cell.n_set_aside == 1
    assert cell.decode_tok_s_server.n == 4
    reason = noisy_reason(s, CLAIMS)  # four clean samples are too few for an interval: it says so, and why
    assert reason is not None and reason.endswith("; 4 clean, 1 of 5 samples set aside (1 stalled)")


def test_a_server_that_keeps_stalling_stops_the_bench(tmp_path: Path) -> None:
    script = Script(ttft_s=0.03, itl_s=0.02, modes=deque(["ok", "stall", "stall", "stall", "ok", "ok"]))
    with ScriptedServer(script) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(samples=6, stall_floor_s=0.5), None)
    assert s.status == "partial"
    assert s.stopped_reason == "server stalled: 3 requests in a row got no byte within their stall bound"
    assert s.cells[0].n == 4 and s.cells[0].stalls == 3 and s.cells[0].n_clean == 1


def test_normal_streams_are_not_stalled(tmp_path: Path) -> None:
    with ScriptedServer(Script(ttft_s=0.03, itl_s=0.02)) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(samples=3, stall_floor_s=1.0), None)
    assert s.cells[0].stalls == 0 and s.cells[0].n_ok == 3 and s.status == "complete"


def test_sequential_sampling_stops_at_five_once_the_interval_is_within_target(tmp_path: Path) -> None:
    with ScriptedServer(Script(ttft_s=0.03, itl_s=0.02)) as srv:
        s = run_bench(attach(srv.base_url, "m"),
                      _settings(samples=3, max_samples=10, interval_target_pct=50.0), None)
    iv = s.cells[0].interval
    assert iv is not None and s.cells[0].n == 5
    assert iv.met and iv.stopped_by == "target met" and iv.metric == "decode_tok_s_server"
    assert iv.half_width_pct is not None and iv.half_width_pct <= 50
    assert iv.note.endswith("from 5 samples (target ±50%); stopped: target met")


def test_sequential_sampling_stops_at_the_sample_cap_and_reports_the_width(tmp_path: Path) -> None:
    with ScriptedServer(Script(ttft_s=0.03, itl_s=0.02)) as srv:
        s = run_bench(attach(srv.base_url, "m"),
                      _settings(samples=3, max_samples=7, interval_target_pct=0.0001), None)
    iv = s.cells[0].interval
    assert iv is not None and s.cells[0].n == 7 and iv.stopped_by == "max samples" and not iv.met
    assert iv.half_width_pct is not None and "target ±0.0001% not met" in iv.note


def test_sequential_sampling_stops_at_the_time_cap_with_too_few_for_an_interval(tmp_path: Path) -> None:
    with ScriptedServer(Script(ttft_s=0.03, itl_s=0.02)) as srv:
        s = run_bench(attach(srv.base_url, "m"),
                      _settings(samples=3, max_samples=50, interval_target_pct=0.0001, max_cell_s=0.2), None)
    iv = s.cells[0].interval
    assert iv is not None and s.cells[0].n == 3 and iv.stopped_by == "max time"
    assert iv.note.startswith("too few for an interval (n=3 < 5)")
    reason = noisy_reason(s, CLAIMS)
    assert reason is not None and "decode_tok_s_server: too few for an interval (n=3 < 5)" in reason


@pytest.fixture
def cpu_hog() -> Iterator[int]:
    """A bounded busy loop outside this process's tree (reparented away from us), as another user's job is."""
    with hog(1.0, 120, settle_s=0.3) as (pid,):
        yield pid


def test_samples_beside_a_cpu_hog_are_marked_contended_set_aside_and_never_claim_grade(
    tmp_path: Path, cpu_hog: int,
) -> None:
    """A hog that never goes away: every sample is contended, set aside, waited on, replaced until the cell's
    time is spent; the cell has no figure and is not claim-grade, and says why."""
    results = ResultsDir(tmp_path / "r")
    said: list[str] = []
    with ScriptedServer(Script(ttft_s=0.03, itl_s=0.02)) as srv, \
            ContentionWatch(ExcludeSet([os.getpid()]), interval_s=0.25) as watch:
        s = run_bench(attach(srv.base_url, "m"), _settings(samples=3, max_cell_s=3.0), results, watch=watch,
                      progress=said.append)
    lines = _lines(results)
    n = len(lines)
    assert n >= 2 and [ln["contended"] for ln in lines] == [True] * n
    assert all(ln["set_aside"].startswith("host contended: others held ") for ln in lines)
    assert all(ln["host"]["others_cores"] >= 0.2 for ln in lines)
    assert any(f"(pid {cpu_hog})" in " ".join(ln["host"]["top"]) for ln in lines)
    assert any("host contended; waited" in x and "for a quiet window (still busy)" in x for x in said)
    cell = s.cells[0]
    assert cell.contended == n and cell.contention and cell.contention[0].startswith("others held ")
    # no clean sample: the figures are the contended ones, labelled
    assert cell.n_clean == 0 and cell.n_set_aside == n and cell.figures_contended
    assert cell.decode_tok_s_server.n == n
    assert cell.interval is not None and cell.interval.stopped_by in ("max time", "sample budget")
    assert s.host is not None and (s.host.samples, s.host.samples_contended) == (n, n)
    assert "bench" in s.host.phases and s.host.phases["bench"].contended
    reason = noisy_reason(s, CLAIMS)
    assert reason is not None and reason.startswith(
        f"noisy: ctx 120 × c1: no clean sample: the figures are from contended ones; {n} of {n} samples set aside "
        f"({n} host contended: others held ")


@pytest.fixture
def fake_process() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The fake llama-server in its own process, so it can be stopped (SIGSTOP) like a real one."""
    with fake_server_process(0.05, 0.05, quiet=True) as served:
        yield served


def test_a_sigstopped_server_is_recorded_stalled_not_as_a_normal_sample(
    tmp_path: Path, fake_process: tuple[str, subprocess.Popen[bytes]],
) -> None:
    import threading

    url, proc = fake_process
    results = ResultsDir(tmp_path / "r")

    def stop_for_a_while() -> None:
        # after the first request (~2 s: 40 tokens × 50 ms), stop the server mid-stream for 4 s
        time.sleep(2.6)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(4.0)
        proc.send_signal(signal.SIGCONT)

    stopper = threading.Thread(target=stop_for_a_while)
    t0 = time.monotonic()
    stopper.start()
    s = run_bench(attach(url, "m"), _settings(gen_tokens=40, samples=4, stall_floor_s=1.0, timeout_s=60.0), results)
    stopper.join()
    wall = time.monotonic() - t0
    lines = _lines(results)
    stalled = [ln for ln in lines if ln["stalled"]]
    assert stalled, [ln["failure"] for ln in lines]
    assert all(ln["failure"].startswith("stalled: no byte for ") and not ln["ok"] for ln in stalled)
    # No sample that lived through the stop was kept as a normal one.
    assert all(ln["itl_ms_max"] < 1000 for ln in lines if ln["ok"])
    assert s.cells[0].stalls == len(stalled) and s.cells[0].n_set_aside == len(stalled)
    assert s.cells[0].n_clean == 4  # each stalled sample replaced
    assert wall < 30, "stalls are cut by inactivity, not waited on for the 60 s timeout"
    reason = noisy_reason(s, CLAIMS)
    assert reason is not None and f"{len(stalled)} stalled" in reason


def test_a_contended_cell_stops_below_the_minimum_once_its_time_is_spent(tmp_path: Path, cpu_hog: int) -> None:
    # On a busy host one round can take minutes (llama.cpp's decode drops 10-40x); the minimum count must not
    # hold a cell that can no longer be claim-grade past its time bound.
    with ScriptedServer(Script(ttft_s=0.03, itl_s=0.02)) as srv, \
            ContentionWatch(ExcludeSet([os.getpid()]), interval_s=0.25) as watch:
        s = run_bench(attach(srv.base_url, "m"),
                      _settings(samples=50, max_samples=60, interval_target_pct=0.0001, max_cell_s=1.0), None,
                      watch=watch)
    cell = s.cells[0]
    assert cell.interval is not None and cell.interval.stopped_by == "max time"
    assert 1 <= cell.n < 50 and cell.contended is not None and cell.contended >= 1


def test_a_quiet_cell_still_takes_its_minimum_past_the_time_bound(tmp_path: Path) -> None:
    with ScriptedServer(Script(ttft_s=0.01, itl_s=0.01)) as srv:
        s = run_bench(attach(srv.base_url, "m"),
                      _settings(samples=4, max_samples=10, interval_target_pct=0.0001, max_cell_s=0.01), None)
    assert s.cells[0].n == 4 and s.cells[0].interval is not None
    assert s.cells[0].interval.stopped_by == "max time"
