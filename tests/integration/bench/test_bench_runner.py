"""run_bench against the scripted server: exact prompts, freshness, failures, attach facts, /metrics."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from servepack.bench.config import BenchSettings
from servepack.bench.runner import run_bench
from servepack.engine.attach import attach
from servepack.engine.base import Endpoint
from servepack.errors import ServerDied
from servepack.store import ResultsDir
from servepack.testing import Script, ScriptedServer


def _settings(**kw: Any) -> BenchSettings:
    base: dict[str, Any] = {"context_marks": (120,), "gen_tokens": 12, "samples": 2, "timeout_s": 5.0}
    return BenchSettings(**{**base, **kw})


def _lines(results: ResultsDir) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in results.file("requests.jsonl").read_text().splitlines()]


def test_exact_fresh_and_written(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path / "r")
    # In-process fake: the GIL's 5 ms switch interval blurs gaps, so keep gaps well above it.
    with ScriptedServer(Script(ttft_s=0.03, itl_s=0.02)) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(context_marks=(120, 333), warmup=1), results)
        served = list(srv.script.served)
    assert s.all_fresh and s.status == "complete" and s.server_kind == "llama-server"
    assert [c.context_tokens for c in s.cells] == [120, 333]
    assert [(c.n, c.n_fresh) for c in s.cells] == [(2, 2), (2, 2)]
    assert s.prompt_token_report == ("Two prompts contained 120 endpoint tokens (target 120). "
                                     "Two prompts contained 333 endpoint tokens (target 333).")
    assert [r["prompt_n"] for r in served] == [120, 120, 120, 333, 333, 333]  # warmup + 2 per cell
    lines = _lines(results)
    assert len(lines) == 6 and [ln["warmup"] for ln in lines].count(True) == 2
    assert all(ln["schema_version"] == "servepack.bench.request/v2" for ln in lines)
    written = json.loads(results.file("server_bench.json").read_text())
    assert written["schema_version"] == "servepack.server_bench/v1"
    c = s.cells[0]
    assert c.ttft_ms.median is not None and c.ttft_ms.median >= 30
    # The fake's own record of what it sent is the truth; a loaded host may shift its schedule.
    assert c.decode_tok_s_client.median == pytest.approx(c.decode_tok_s_server.median, rel=0.1)
    assert c.metrics_diff == {"llamacpp:prompt_tokens_total": 240.0, "llamacpp:tokens_predicted_total": 24.0}


def test_cached_samples_are_marked(tmp_path: Path) -> None:
    with ScriptedServer(Script(cache_n=24)) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(), None)
    assert not s.all_fresh and s.cells[0].n_fresh == 0 and s.cells[0].n_ok == 2
    assert s.cells[0].ttft_ms.n == 0 and s.cells[0].decode_tok_s_server.n == 2


def test_each_failure_is_a_recorded_sample(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path / "r")
    script = Script(modes=deque(["500", "drop", "malformed", "stall", "ok"]))
    with ScriptedServer(script) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(samples=5, timeout_s=1.0), results)
    cell = s.cells[0]
    assert cell.n == 5 and cell.n_ok == 1 and len(cell.failures) == 4
    reasons = [ln["failure"] for ln in _lines(results)]
    assert reasons[0].startswith("HTTP 500")
    assert "dropped" in reasons[1] or "end marker" in reasons[1]
    assert reasons[2].startswith("malformed SSE line")
    assert "1 s per-request timeout" in reasons[3]
    assert reasons[4] is None
    assert s.wall_s < 30


def test_short_output_flagged(tmp_path: Path) -> None:
    with ScriptedServer(Script(short_by=3)) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(), None)
    assert s.cells[0].short_outputs == 2 and s.cells[0].decode_tok_s_client.n == 0


def test_non_llama_server_degrades_to_facts(tmp_path: Path) -> None:
    with ScriptedServer(Script(llama=False)) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(), ResultsDir(tmp_path / "r"))
    assert s.server_kind == "openai-compatible"
    for key in ("prompt.exact_tokens", "server.metrics", "request.cache_prompt", "server.props"):
        assert s.facts[key].state == "unavailable" and s.facts[key].reason
    assert s.cells[0].n_ok == 2 and s.cells[0].metrics_diff is None
    assert s.all_fresh  # usage.prompt_tokens_details.cached_tokens == 0
    assert "target 120" in s.prompt_token_report


def test_strict_openai_server_without_ignore_eos(tmp_path: Path) -> None:
    with ScriptedServer(Script(llama=False, strict_openai=True)) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(), None)
    assert s.facts["output.exact_length"].state == "unavailable"
    assert s.cells[0].n_ok == 2


def test_deferred_requests_flagged(tmp_path: Path) -> None:
    with ScriptedServer(Script(deferred=2, ttft_s=0.3)) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(concurrency=(4,), samples=1, metrics_poll_s=0.05), None)
    cell = s.cells[0]
    assert cell.deferred and cell.requests_deferred_max == 2
    assert cell.n == 4 and cell.decode_tok_s_aggregate.n == 1


class _DeadServer:
    def check_alive(self) -> None:
        raise ServerDied("llama-server (pid 1) exited with code 139 during the run")


def test_server_death_propagates_after_writing(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path / "r")
    with ScriptedServer(Script(modes=deque(["drop"]))) as srv, pytest.raises(ServerDied):
        run_bench(Endpoint(srv.base_url, "m", watch=[_DeadServer()]), _settings(), results)
    written = json.loads(results.file("server_bench.json").read_text())
    assert written["status"] == "partial" and written["stopped_reason"] == "server died"
    assert len(_lines(results)) == 1


def test_connection_closed_unanswered_is_sent_once_more_and_marked(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path / "r")
    with ScriptedServer(Script(modes=deque(["ok", "close", "ok"]))) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(samples=2), results)
    lines = _lines(results)
    assert [ln["ok"] for ln in lines] == [True, True]
    assert [ln["resent"] for ln in lines] == [False, True]
    assert s.cells[0].n_ok == 2


def test_connection_closed_twice_is_a_failed_sample(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path / "r")
    with ScriptedServer(Script(modes=deque(["close", "close", "ok"]))) as srv:
        s = run_bench(attach(srv.base_url, "m"), _settings(samples=2), results)
    lines = _lines(results)
    assert lines[0]["ok"] is False and "without sending a response" in lines[0]["failure"]
    assert lines[1]["ok"] is True
    assert s.cells[0].n_ok == 1


def test_every_streamed_request_goes_out_on_the_load_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bench cells and capacity points send on one client (bench/wire.py): every request of a cell, warmups
    included, is one WireClient stream; connections for the concurrent round are opened before it, so none of its
    requests waits for a connect. Wrong answers: a stream sent by another client (fewer streams than requests),
    a round that opened its own connections."""
    from servepack.bench.wire import WireClient

    streams: list[str] = []
    opened: list[int] = []
    real_stream, real_open = WireClient.stream, WireClient._open

    async def counted(self: WireClient, url: str, *a: Any, **kw: Any) -> None:
        streams.append(url)
        await real_stream(self, url, *a, **kw)

    async def counted_open(self: WireClient) -> Any:
        opened.append(len(streams))
        return await real_open(self)

    monkeypatch.setattr(WireClient, "stream", counted)
    monkeypatch.setattr(WireClient, "_open", counted_open)
    results = ResultsDir(tmp_path / "r")
    with ScriptedServer(Script(ttft_s=0.03, itl_s=0.02)) as srv:
        run_bench(attach(srv.base_url, "m"), _settings(concurrency=(4,), samples=2, warmup=1), results)
        sent = len(srv.script.requests)
    assert len(_lines(results)) == sent == len(streams) == 9  # one warmup, two rounds of four
    assert all(u.endswith("/v1/chat/completions") for u in streams)
    # the warmup opened its own connection (as its stream began), then three more opened before the round's first
    assert opened == [1, 1, 1, 1]


def test_a_rounds_requests_go_at_their_start_slots(tmp_path: Path) -> None:
    """Request k of a round is written at k × 2 ms (the start slots of a capacity point's streams), so none waits
    behind the others' arrival at the server. Wrong answer: the round written in one instant (all within 1 ms)."""
    from servepack.bench.shapes.base import STREAM_GAP_S, slot_offset

    assert [slot_offset(k, 4) for k in range(3)] == [0.0, STREAM_GAP_S, 2 * STREAM_GAP_S]
    assert slot_offset(999, 1000) < 1.0  # all of them within a second, however many
    results = ResultsDir(tmp_path / "r")
    with ScriptedServer(Script(ttft_s=0.03, itl_s=0.02)) as srv:
        run_bench(attach(srv.base_url, "m"), _settings(concurrency=(8,), samples=1), results)
    sends = sorted(ln["t_sent_unix"] for ln in _lines(results))
    after = [round(x - sends[0], 4) for x in sends]
    # each at its slot or later (a late wake-up is late, never early; the first may be late by a little itself)
    assert len(sends) == 8 and all(t >= k * STREAM_GAP_S - 0.001 for k, t in enumerate(after)), after
    assert after[-1] < 0.5
