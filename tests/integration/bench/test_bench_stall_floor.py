"""Stalls without a reference: the fake server stops (as SIGSTOP stops llama-server) in the cell's first request,
before its first token or mid-decode. The stream is cut at the pack's floor, not waited on, the server checked,
the sample recorded stalled and kept out of every figure; a long first token from a server that is working is not
a stall."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from servepack.bench.config import BenchSettings
from servepack.bench.runner import run_bench
from servepack.engine.attach import attach
from servepack.store import ResultsDir
from servepack.testing import Script, ScriptedServer

FLOOR_S = 2.0


def _settings(**kw: Any) -> BenchSettings:
    base: dict[str, Any] = {"context_marks": (120,), "gen_tokens": 12, "samples": 3, "timeout_s": 30.0,
                            "stall_floor_s": FLOOR_S}
    return BenchSettings(**{**base, **kw})


def _lines(results: ResultsDir) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in results.file("requests.jsonl").read_text().splitlines()]


def test_a_stop_before_the_first_token_of_the_first_request_is_cut_at_the_floor(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path / "r")
    script = Script(ttft_s=0.03, itl_s=0.02, freeze=(1, 0, 6.0))
    t0 = time.monotonic()
    with ScriptedServer(script) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(), results)
    assert time.monotonic() - t0 < 15
    first, *rest = _lines(results)
    assert first["stalled"] is True and first["ok"] is False and first["stall_bound_s"] == FLOOR_S
    # cut at the floor plus the server check (half the floor), never after the 6 s stop or the 30 s timeout
    assert FLOOR_S * 1000 <= first["e2e_ms"] < (FLOOR_S * 1.5 + 0.8) * 1000
    assert first["ttft_ms"] is None
    assert "bound 2.0 s = floor 2 s, no earlier first event in the cell" in first["failure"]
    assert "server check: /health unanswered within 1 s" in first["failure"]
    assert rest and all(not ln["stalled"] and ln["ok"] for ln in rest)
    cell = s.cells[0]
    assert cell.stalls == 1
    # the stalled sample is in no figure: every TTFT is the scripted 30 ms, not seconds
    assert cell.ttft_ms.n == cell.n_ok == len(rest)
    assert cell.ttft_ms.max is not None and cell.ttft_ms.max < 1000


def test_a_stop_mid_decode_of_the_first_request_is_cut_at_the_floor(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path / "r")
    script = Script(ttft_s=0.03, itl_s=0.02, freeze=(1, 3, 6.0))
    with ScriptedServer(script) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(), results)
    first, *rest = _lines(results)
    assert first["stalled"] is True and first["ok"] is False and first["stall_bound_s"] == FLOOR_S
    assert len(first["chunk_ms"]) == 3  # three tokens arrived, then nothing
    assert first["e2e_ms"] < (FLOOR_S + 0.8) * 1000
    assert "bound 2.0 s = max(floor 2 s, no earlier gap known)" in first["failure"]
    assert all(not ln["stalled"] for ln in rest)
    cell = s.cells[0]
    assert cell.stalls == 1
    # Wrong answer: the 2 s gap and the stalled sample's rate must not reach the figures.
    assert cell.itl_ms.max is not None and cell.itl_ms.max < 1000
    assert cell.decode_tok_s_server.n == len(rest)
    assert cell.decode_tok_s_client.min is not None and cell.decode_tok_s_client.min > 20


def test_a_long_first_token_from_a_working_server_is_not_a_stall(tmp_path: Path) -> None:
    """A long prompt may take longer than the floor: the server answers its check, so the request runs on."""
    results = ResultsDir(tmp_path / "r")
    with ScriptedServer(Script(ttft_s=2.5, itl_s=0.01)) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(samples=1, stall_floor_s=1.0), results)
    (line,) = _lines(results)
    assert line["ok"] is True and line["stalled"] is False and line["ttft_ms"] >= 2400
    assert s.cells[0].stalls == 0 and s.cells[0].ttft_ms.median is not None


def test_the_replacement_waits_for_the_server_to_finish_the_cut_request(tmp_path: Path) -> None:
    """Continued after a stop, llama-server generates the cut request to its end before it notices the client left;
    a replacement sent meanwhile would queue behind it (its TTFT is not the server's). So the next request goes
    only once /metrics shows nothing processing."""
    results = ResultsDir(tmp_path / "r")
    script = Script(ttft_s=0.03, itl_s=0.05, freeze=(1, 3, 3.0), finish_cut=True)
    with ScriptedServer(script) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(gen_tokens=80, samples=2), results)
        finished = list(srv.script.cut_finished)
    first, *rest = _lines(results)
    assert first["stalled"] and len(finished) == 1
    # the cut request ran on after the 3 s stop to its 80th token (~4 s after it was sent)
    assert finished[0] - first["t_sent_unix"] > 3.5
    assert rest and rest[0]["t_sent_unix"] >= finished[0]  # Wrong answer: sent into the busy server
    assert s.cells[0].n_clean == 2


def test_the_replacement_waits_by_the_servers_slots_where_it_serves_no_metrics(tmp_path: Path) -> None:
    """The wait is the engine's own "at rest?" check (the one a capacity sweep waits on before a point): a server
    without /metrics is read by its /slots. Wrong answer: no /metrics, no wait, the replacement sent into the busy
    server."""
    results = ResultsDir(tmp_path / "r")
    script = Script(ttft_s=0.03, itl_s=0.05, freeze=(1, 3, 3.0), finish_cut=True, metrics=False)
    with ScriptedServer(script) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(gen_tokens=80, samples=2), results)
        finished = list(srv.script.cut_finished)
    first, *rest = _lines(results)
    assert first["stalled"] and len(finished) == 1 and s.facts["server.metrics"].state == "unavailable"
    assert rest and rest[0]["t_sent_unix"] >= finished[0]
    assert s.cells[0].n_clean == 2
