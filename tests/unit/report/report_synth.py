"""Results directories with every kind of data the report draws, written by the real writers.

Concurrency sweeps, many chunks per request (ITL), unfresh samples, memory.jsonl with a mark, a roofline and a
smoke suite whose cases carry request/response bodies. `hostile` puts a string into every place a record's text
reaches the page (case ids, categories, rationale, request and response, finding messages, notes, the receipt
error), so the escaping tests can look for it.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "records"))

from records_synth import write_receipt

from servepack.bench.config import BenchSettings
from servepack.bench.roofline import Roofline
from servepack.bench.sample import RequestSample
from servepack.bench.summary import BenchSummary, cell_summary, prompt_token_report
from servepack.host.memory import MemorySummary
from servepack.packs import load_pack
from servepack.smoke.result import Attempt, CaseResult, Finding, SuiteResult, Verdict
from servepack.store import ResultsDir

GIB = 1 << 30
T0 = 1_785_000_000.0  # 2026-07-25, the sampler's first sample


def _iso(t: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def request(ctx: int, conc: int, rnd: int, stream: int, gen: int, decode: float, prefill: float, t_sent: float,
            *, fresh: bool = True, warmup: bool = False, rng: random.Random) -> RequestSample:
    """One streamed request, jittered so distributions have a shape; at most 24 content chunks (a chunk may carry
    several tokens), which keeps the pooled inter-token bootstrap quick."""
    ttft = ctx / prefill * 1000 * rng.uniform(0.95, 1.08)
    k = min(gen, 24)
    per_gap = (gen - 1) / max(k - 1, 1) * 1000 / decode
    gaps = [per_gap * rng.uniform(0.85, 1.25) for _ in range(k - 1)]
    chunks = [ttft]
    for g in gaps:
        chunks.append(chunks[-1] + g)
    dec_c = (gen - 1) / ((chunks[-1] - ttft) / 1000)
    return RequestSample(
        context_tokens=ctx, concurrency=conc, round=rnd, stream=stream, warmup=warmup, nonce=f"n{ctx}-{conc}-{rnd}-"
        f"{stream}", endpoint_prompt_tokens=ctx, prompt_sized_exactly=True, server_prompt_tokens=ctx,
        gen_tokens_requested=gen, generated_tokens=gen, generated_tokens_source="usage.completion_tokens",
        t_sent_unix=t_sent, client_queue_ms=0.4, ttfr_ms=ttft * 0.97, ttft_ms=ttft, e2e_ms=chunks[-1] + 2,
        chunk_ms=[round(c, 3) for c in chunks], itl_ms_median=sorted(gaps)[len(gaps) // 2], itl_ms_p90=max(gaps),
        itl_ms_max=max(gaps), tpot_ms=(chunks[-1] - ttft) / (gen - 1), prompt_per_ttft_tok_s_client=ctx / ttft * 1000,
        prompt_eval_tok_s_server=ctx / ttft * 1000 * 1.04, decode_tok_s_client=dec_c, decode_tok_s_server=dec_c * 1.02,
        prefill_gap_pct=-3.8, decode_gap_pct=-2.0, timings={"cache_n": 0 if fresh else 12, "prompt_n": ctx},
        usage=None, finish_reason="length", http_status=200, ok=True, failure=None, fresh=fresh,
        fresh_reason="cache_n == 0" if fresh else "12 prompt tokens reused from the server's cache",
        short_output=False,
    )


def suite_result(start: float, hostile: str | None = None) -> SuiteResult:
    h = hostile or ""
    cases = []
    layout = [("tool_json", True, True), ("tool_json", True, True), ("tool_json", False, True),
              ("no_tool", True, True), ("no_tool", False, False), (f"multi_turn{h}", True, True),
              (f"multi_turn{h}", False, False)]
    for i, (cat, strict, lenient) in enumerate(layout):
        findings = [] if strict else [Finding(code="EXTRACTION_CALL_IN_CONTENT" if lenient else "SEM_WRONG_TOOL",
                                              layer="extraction" if lenient else "semantics",
                                              message=f"the call came back in the content{h}", lenient_ok=lenient)]
        v = Verdict(strict_pass=strict, lenient_pass=lenient, findings=findings)
        req = {"model": "qwen", "messages": [{"role": "user", "content": f"What is the weather in Paris?{h}"}],
               "tools": [{"type": "function", "function": {"name": "get_weather"}}], "temperature": 0.0}
        resp = {"choices": [{"message": {"role": "assistant", "content": f'{{"name": "get_weather"}}{h}'}}]}
        att = Attempt(mode="nonstream", request=req, response=resp, duration_s=1.2 + i / 10, verdict=v)
        cases.append(CaseResult(case_id=f"{cat}.case{i}{h}", category=cat, rationale=f"why this case{h}",
                                attempts=[att], strict_pass=strict, lenient_pass=lenient, codes=v.codes))
    return SuiteResult.tally(
        suite="agent_smoke", suite_version="1", executed=False, base_url="http://127.0.0.1:1", model="qwen",
        temperature=0.0, started_at=_iso(start), duration_s=9.5, runner_hash="3bb81080" + "0" * 56,
        scorer_version="1", cases=cases, repeat=1)


def rich_run(
    root: Path, name: str, *, preset: str = "default", marks: Sequence[int] = (256, 1024, 4096),
    concurrency: Sequence[int] = (1, 2, 4), gen: int = 48, samples: int = 5, decode: float = 36.0,
    prefill: float = 160.0, ended_at: str = "2026-07-28T10:00:00.000Z", smoke: bool = True,
    memory: bool = True, roofline: bool = True, status: str = "complete", hostile: str | None = None,
    seed: int = 1,
) -> Path:
    """One run directory as `servepack run` leaves it, with every section of the report fed."""
    rng = random.Random(seed)
    loaded = load_pack(None)
    results = ResultsDir(root / name)
    settings = BenchSettings(context_marks=tuple(marks), gen_tokens=gen, samples=samples,
                             concurrency=tuple(concurrency), warmup=1)
    t = T0 + 3.0
    bench_start = t
    measured, cells = [], []
    with results.jsonl("requests.jsonl") as w:
        for ctx in marks:
            for conc in concurrency:
                per_stream = decode / (1 + 0.3 * (conc - 1)) * (1 - ctx / 40000)
                w.write(request(ctx, conc, -1, 0, gen, per_stream, prefill, t, warmup=True, rng=rng))
                group = []
                for rnd in range(samples):
                    for stream in range(conc):
                        fresh = not (conc == 1 and rnd == samples - 1 and ctx == marks[0])
                        s = request(ctx, conc, rnd, stream, gen, per_stream, prefill / conc ** 0.2, t, fresh=fresh,
                                    rng=rng)
                        group.append(s)
                        w.write(s)
                    t += 2.0
                measured += group
                cells.append(cell_summary(group, context_tokens=ctx, concurrency=conc, settings=settings,
                                          deferred_max=None, metrics_diff=None, stopped=None))
    bench_end = t
    rf = None
    if roofline:
        best = max((c.decode_tok_s_server.median or 0) for c in cells if c.concurrency == 1)
        ceiling = 21.0e9 / 380e6
        rf = Roofline(kind="dense", bytes_per_token=380_000_000, total_weight_bytes=468_000_000, expert_count=None,
                      expert_used_count=None, bandwidth_gbs=21.0, bandwidth_source="probe: single-thread memcpy",
                      ceiling_tok_s=ceiling, decode_tok_s=best, decode_source="server",
                      fraction_of_ceiling=best / ceiling)
    smoke_start = t + 1
    end = smoke_start + (10.5 if smoke else 0) + 1
    mem = MemorySummary(
        samples=0, duration_s=end - T0, interval_s=0.1, peak_server_rss_bytes=int(0.64 * GIB),
        host_available_before_load_bytes=20 * GIB, host_available_after_load_bytes=int(19.3 * GIB),
        min_available_bytes=int(19.1 * GIB), swap_total_bytes=2 * GIB, min_swap_free_bytes=int(1.5 * GIB),
        gpu_peak_used_bytes=None, gpu_unavailable_reason="NVML unavailable", guard_events=[],
        marks=[{"label": "model_loaded", "t_unix": T0 + 2.0, "host_available_bytes": int(19.3 * GIB)}],
    )
    if memory:
        n = 0
        with results.jsonl("memory.jsonl") as w:
            tt = 0.0
            while T0 + tt < end:
                load = min(tt / 2.0, 1.0)
                busy = 0.04 if bench_start <= T0 + tt <= bench_end else 0.0
                w.write({"schema_version": "servepack.memory/v1", "t_unix": T0 + tt, "t_s": round(tt, 4),
                         "server_pid": 4242, "server_rss_bytes": int((0.05 + 0.55 * load + busy) * GIB),
                         "host_available_bytes": int((20 - 0.7 * load - busy - rng.uniform(0, 0.02)) * GIB),
                         "swap_free_bytes": int(1.5 * GIB), "gpu_used_bytes": None,
                         "label": "model_loaded" if abs(tt - 2.0) < 1e-6 else None})
                n += 1
                tt = round(tt + 0.1, 4)
        mem = mem.model_copy(update={"samples": n})
    bench = BenchSummary(
        status="complete" if status == "complete" else "partial", started_at=_iso(bench_start),
        ended_at=_iso(bench_end), wall_s=bench_end - bench_start, base_url="http://127.0.0.1:1", model="qwen",
        mode="launch", server_kind="llama-server", settings=settings, cells=cells,
        all_fresh=all(s.fresh for s in measured), prompt_token_report=prompt_token_report(measured), facts={},
        roofline=rf, roofline_unavailable=None if rf else "no model header", memory=mem,
    )
    results.write_json("server_bench.json", bench)
    if smoke:
        suite = suite_result(smoke_start, hostile)
        with results.jsonl("agent_smoke.cases.jsonl") as log:
            for case in suite.cases:
                log.write(case)
        results.write_json("agent_smoke.json", suite)
    results.write_text("server.log", "llama-server log\n")
    write_receipt(results, loaded, preset, ended_at, status)
    if hostile is not None:
        # The receipt's free text reaches the page too (notes, error): rewrite it, then re-check nothing else.
        path = results.path / "receipt.json"
        doc = json.loads(path.read_text())
        doc["notes"] = [f"a note{hostile}"]
        doc["error"] = f"an error{hostile}" if status != "complete" else None
        doc["host"]["cpu_model"] = f"CPU{hostile}"
        path.write_text(json.dumps(doc))
    return results.path
