"""servepack bench against the real embedded llama-server: exact, fresh, client and server agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_plan import clean_samples
from servepack.bench.config import BenchSettings
from servepack.bench.runner import run_bench
from servepack.engine.base import Endpoint
from servepack.store import ResultsDir


def test_bench_fresh_exact_and_paired(embedded_server: Endpoint, tmp_path: Path) -> None:
    results = ResultsDir(tmp_path / "bench")
    settings = BenchSettings(context_marks=(256,), gen_tokens=32, samples=2, timeout_s=240)
    s = run_bench(embedded_server, settings, results)
    cell = s.cells[0]
    assert s.status == "complete" and s.server_kind == "llama-server"
    lines = [json.loads(ln) for ln in results.file("requests.jsonl").read_text().splitlines()]
    # the plan's 2 clean samples; a stall on a loaded host is set aside, marked, and replaced (tests/bench_plan.py)
    clean = clean_samples(cell.model_dump(), lines, plan=2)
    assert s.all_fresh and cell.n_fresh == cell.n_ok >= len(clean), cell.failures
    assert [ln["server_prompt_tokens"] for ln in clean] == [256] * len(clean), s.prompt_token_report
    assert all(ln["fresh"] and ln["timings"]["cache_n"] == 0 and ln["generated_tokens"] == 32 for ln in clean)
    client, server = cell.decode_tok_s_client.median, cell.decode_tok_s_server.median
    assert client is not None and server is not None
    assert client == pytest.approx(server, rel=0.15)
    assert cell.prompt_per_ttft_tok_s_client.median is not None and cell.prompt_eval_tok_s_server.median is not None
    assert cell.prompt_per_ttft_tok_s_client.median <= cell.prompt_eval_tok_s_server.median * 1.05
    assert s.roofline is not None and s.roofline.kind == "dense" and s.roofline.fraction_of_ceiling
