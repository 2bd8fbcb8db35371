"""Ctrl-C in the middle of a bench round (a point of the `round` shape, driven by `load_shapes.drive`): the round's
requests in flight are cancelled at once, KeyboardInterrupt reaches the caller, and requests.jsonl keeps every
request that finished, each line whole."""

from __future__ import annotations

import _thread
import json
import threading
import time
from pathlib import Path

import pytest

from servepack.bench.config import BenchSettings
from servepack.bench.runner import run_bench
from servepack.engine.attach import attach
from servepack.store import ResultsDir
from servepack.testing import Script, ScriptedServer


@pytest.mark.usefixtures("terminal_sigint")
def test_ctrl_c_mid_round_cancels_the_round_and_keeps_the_finished_requests(tmp_path: Path) -> None:
    # Rounds of 4 requests, each ~2 s (200 tokens × 10 ms); Ctrl-C once the second round is under way.
    script = Script(queue=True, slots=4, ttft_s=0.01, itl_s=0.01)
    settings = BenchSettings(context_marks=(40,), gen_tokens=200, samples=5, concurrency=(4,), timeout_s=30.0)
    results = ResultsDir(tmp_path / "r")
    done = threading.Event()

    def ctrl_c() -> None:
        while not done.wait(0.01):
            if script.generations >= 6:  # round 1's four ended, round 2's started
                _thread.interrupt_main()
                return

    with ScriptedServer(script) as srv:
        watcher = threading.Thread(target=ctrl_c, daemon=True)
        watcher.start()
        t0 = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                run_bench(attach(srv.base_url, "m"), settings, results)
        finally:
            done.set()
            watcher.join(5)
        waited = time.monotonic() - t0
    lines = [json.loads(ln) for ln in results.file("requests.jsonl").read_text().splitlines()]
    assert 4 <= len(lines) < 20, len(lines)  # round 1 kept; the other rounds never ran to their end
    assert all(x["ok"] for x in lines[:4]) and {x["round"] for x in lines[:4]} == {0}
    # round 1 ends at ~2 s; round 2 waited out would end at ≥ 4 s: the round was cut, not waited out
    assert waited < 3.8, waited
