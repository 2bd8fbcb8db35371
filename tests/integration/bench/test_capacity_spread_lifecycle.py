"""A capacity point spread over client worker processes (`--client-workers 2`) when the run ends badly: Ctrl-C, a
dead server, a worker killed. The run ends as the one-process run does in each case, the finished requests are
kept and counted, and no worker process is left behind (checked by pid)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from servepack.bench.capacity import parse_slo
from servepack.bench.load import LoadSettings
from servepack.bench.sweep import run_capacity
from servepack.engine.attach import attach
from servepack.engine.base import Endpoint
from servepack.errors import ServerDied
from servepack.store import ResultsDir
from servepack.testing import Script, ScriptedServer

# "Does not hang" only: a point of these tests would otherwise run for POINT_S (its duration), so a run that ends
# in under half of it noticed the event; on a busy host it ends in seconds.
POINT_S = 120.0
ENDS_WITHIN_S = POINT_S / 2


def _settings(**kw: Any) -> LoadSettings:
    # 1 s a request (100 tokens, 10 ms apart): 200 requests keep 2 streams busy for the point's POINT_S
    base: dict[str, Any] = {"prompt_tokens": 30, "gen_tokens": 100, "max_requests": 200, "duration_s": POINT_S,
                            "timeout_s": 10.0, "workers": 2, "client_lag_bound_ms": 1000.0}
    return LoadSettings(**{**base, **kw})


def _workers() -> list[int]:
    """This process's live client worker children (multiprocessing's spawned interpreters), by pid."""
    found = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in children:
            with contextlib.suppress(OSError):
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
    return found


def _gone(pid: int) -> bool:
    """Exited and reaped (a zombie is a child nobody waited for: left behind too)."""
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) == "X"
    except OSError:
        return True


@pytest.fixture
def seen() -> Iterator[set[int]]:
    """Worker pids a test saw; any still running at its end is killed (the test fails on it first)."""
    pids: set[int] = set()
    yield pids
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, os.WNOHANG)



def _when(script: Script, generations: int, seen: set[int], act: Callable[[list[int]], None]) -> threading.Thread:
    """A watcher: once both workers run and the server has started `generations` requests since they appeared
    (the sweep's own probe requests before them not counted), `act(worker pids)`."""
    done = threading.Event()

    def watch() -> None:
        base: int | None = None
        while not done.wait(0.02):
            pids = _workers()
            seen.update(pids)
            if len(pids) == 2:
                base = script.generations if base is None else base
                if script.generations - base >= generations:
                    act(sorted(pids))
                    return

    t = threading.Thread(target=watch, daemon=True)
    t.done = done  # type: ignore[attr-defined]
    t.start()
    return t


def _stop(t: threading.Thread) -> None:
    t.done.set()  # type: ignore[attr-defined]
    t.join(10)


def _records(results: ResultsDir) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in results.file("capacity_requests.jsonl").read_text().splitlines()]


@pytest.mark.usefixtures("terminal_sigint")
@pytest.mark.parametrize(("shape", "level", "after"), [("closed", 2.0, 6), ("open", 4.0, 10)])
def test_ctrl_c_during_a_spread_point_keeps_its_finished_requests_and_leaves_no_worker(
        tmp_path: Path, seen: set[int], shape: str, level: float, after: int) -> None:
    # As the one-process Ctrl-C test (test_capacity.py): KeyboardInterrupt re-raised, capacity.json partial and
    # "interrupted (Ctrl-C)", the interrupted point kept with the requests that had finished. Here they come from
    # both workers (streams 0 and 1), and both worker processes are gone.
    results = ResultsDir(tmp_path / "r")
    script = Script(queue=True, slots=8, ttft_s=0.01, itl_s=0.01)

    def ctrl_c(pids: list[int]) -> None:  # a terminal's Ctrl-C: SIGINT to every process of the foreground group
        for pid in pids:
            os.kill(pid, signal.SIGINT)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    started = time.monotonic()
    with ScriptedServer(script) as srv:
        watcher = _when(script, after, seen, ctrl_c)
        try:
            with pytest.raises(KeyboardInterrupt):
                run_capacity(attach(srv.base_url, "m"), _settings(shape=shape), [parse_slo("ttft_p90=1s")],
                             results, start_level=level, max_level=2 * level)
        finally:
            _stop(watcher)
    assert time.monotonic() - started < ENDS_WITHIN_S
    assert len(seen) == 2 and all(_gone(pid) for pid in seen), [(p, _gone(p)) for p in seen]
    saved = json.loads(results.file("capacity.json").read_text())
    assert saved["status"] == "partial" and saved["stopped_reason"] == "interrupted (Ctrl-C)"
    assert len(saved["points"]) == 1 and saved["points"][0]["stopped"] == "interrupted (Ctrl-C)"
    assert saved["points"][0]["level"] == level
    kept = _records(results)
    assert 2 <= len(kept) == saved["points"][0]["n"] < 200  # what had finished when Ctrl-C came, not nothing
    # both workers' (streams 0 and 1; open loop: every other arrival each), all answered whole
    assert {r["stream"] % 2 for r in kept} == {0, 1} and all(r["ok"] for r in kept)
    assert len({r["nonce"] for r in kept}) == len(kept)


class _Dead:
    def __init__(self, script: Script) -> None:
        self.script = script

    def check_alive(self) -> None:
        if self.script.dead:
            raise ServerDied("scripted server died")


def test_a_server_that_dies_during_a_spread_point_ends_the_sweep_as_with_one_process(tmp_path: Path,
                                                                                     seen: set[int]) -> None:
    # As test_dead_server_mid_sweep_keeps_finished_points: the finished point kept and judged, the dead point kept
    # with its failures counted (none dropped) and "server died", ServerDied re-raised; and no worker left.
    results = ResultsDir(tmp_path / "r")
    script = Script(queue=True, slots=4, ttft_s=0.01, itl_s=0.005, die_after=6)
    said: list[str] = []
    with ScriptedServer(script) as srv:
        watcher = _when(script, 10**9, seen, lambda _: None)
        ep = attach(srv.base_url, "m")
        endpoint = Endpoint(base_url=ep.base_url, model="m", launched=False, watch=[_Dead(script)])
        started = time.monotonic()
        try:
            with pytest.raises(ServerDied):
                run_capacity(endpoint, _settings(max_requests=6, gen_tokens=4, duration_s=POINT_S),
                             [parse_slo("ttft_p90=1s")], results, start_level=2, max_level=8, progress=said.append)
        finally:
            _stop(watcher)
    assert time.monotonic() - started < ENDS_WITHIN_S
    assert seen and all(_gone(pid) for pid in seen)
    saved = json.loads(results.file("capacity.json").read_text())
    assert saved["status"] == "partial" and saved["stopped_reason"].startswith("server died")
    assert [p["level"] for p in saved["points"]] == [2, 4]
    assert saved["points"][0]["n_ok"] == 6 and saved["points"][0]["passed"] is True
    dead = saved["points"][1]
    assert dead["n_ok"] == 0 and dead["stopped"].startswith("server died")
    records = _records(results)
    assert len(records) == 6 + dead["n"] and dead["n"] >= 1  # the failed requests are counted, not dropped
    assert all(not r["ok"] and r["failure"] for r in records if r["point"] == 1)
    assert saved["best_level"] == 2 and saved["first_fail_level"] is None


def test_a_server_that_stops_answering_during_a_spread_point_times_out_and_leaves_no_worker(
        tmp_path: Path, seen: set[int]) -> None:
    # The whole server stops (a SIGSTOP) at the point's first request, for far longer than the point: each worker's
    # requests end at their timeout and are recorded as failures; the point ends, the server is judged as one
    # process judges it (no request answered → "stopped answering" → ServerDied), and nothing waits for it.
    results = ResultsDir(tmp_path / "r")
    script = Script(ttft_s=0.01, itl_s=0.01)
    with ScriptedServer(script) as srv:
        watcher = _when(script, 10**9, seen, lambda _: None)
        script.freeze = (script.generations + 1, 2, 3 * POINT_S)  # after the sweep's own probe requests
        started = time.monotonic()
        try:
            with pytest.raises(ServerDied, match="stopped answering"):
                run_capacity(attach(srv.base_url, "m"), _settings(duration_s=6.0, timeout_s=2.0, gen_tokens=8),
                             [parse_slo("ttft_p90=1s")], results, start_level=2, max_level=2, knee_probe=False)
        finally:
            _stop(watcher)
    assert time.monotonic() - started < ENDS_WITHIN_S
    assert seen and all(_gone(pid) for pid in seen)
    saved = json.loads(results.file("capacity.json").read_text())
    assert saved["status"] == "partial" and saved["stopped_reason"].startswith("server died")
    # the point at 2 streams (both workers) timed its requests out and failed its SLO; the search stepped down to 1,
    # where nothing was answered: "server died", as with one process
    assert [p["level"] for p in saved["points"]] == [2, 1]
    first, last = saved["points"]
    assert first["n"] > first["n_ok"] and not first["passed"] and first["stopped"] is None
    assert last["n"] >= 1 and last["n_ok"] == 0 and last["stopped"].startswith("server died")
    records = _records(results)
    assert len(records) == first["n"] + last["n"]  # every request counted, none dropped
    assert {x["stream"] for x in records if x["point"] == 0} == {0, 1}
    assert all(x["failure"] for x in records if not x["ok"])


def test_a_worker_killed_mid_point_is_noticed_said_and_the_other_workers_requests_kept(tmp_path: Path,
                                                                                       seen: set[int]) -> None:
    results = ResultsDir(tmp_path / "r")
    script = Script(queue=True, slots=8, ttft_s=0.01, itl_s=0.01)
    said: list[str] = []
    killed: list[int] = []

    def kill_one(pids: list[int]) -> None:
        killed.append(pids[-1])
        os.kill(pids[-1], signal.SIGKILL)

    started = time.monotonic()
    with ScriptedServer(script) as srv:
        watcher = _when(script, 6, seen, kill_one)
        try:
            r = run_capacity(attach(srv.base_url, "m"), _settings(), [parse_slo("ttft_p90=1s")], results,
                             start_level=2, max_level=4, progress=said.append)
        finally:
            _stop(watcher)
    assert time.monotonic() - started < ENDS_WITHIN_S  # noticed: the point would run for POINT_S
    assert killed and all(_gone(pid) for pid in seen)
    (line,) = [x for x in said if f"pid {killed[0]}" in x]
    m = re.search(r"client worker (\d) \(pid \d+\) died \(killed by SIGKILL\)", line)
    assert m, line
    dead_w = int(m.group(1))
    # the point is kept, marked, and the sweep stops there: a point missing a worker's requests judges nothing
    assert r.status == "partial" and r.stopped_reason is not None and f"client worker {dead_w}" in r.stopped_reason
    (point,) = r.points
    assert point.stopped == r.stopped_reason and r.best_level is None and r.knee.level is None
    records = _records(results)
    assert records and len(records) == point.n and all(x["ok"] for x in records)
    assert {x["stream"] % 2 for x in records} == {1 - dead_w}  # the live worker's streams only, all of them kept
    saved = json.loads(results.file("capacity.json").read_text())
    assert saved["status"] == "partial" and saved["points"][0]["stopped"] == r.stopped_reason
