"""`servepack bench` (launch or attach) and `servepack llama-bench`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from servepack.cli._options import (
    MAX_TIMEOUT_S,
    FiniteFloat,
    allow_server_flag_option,
    out_option,
    server_model_options,
    verify_model_option,
)
from servepack.cli.render import fmt, print_json, progress, table
from servepack.cli.run import quality_line, wait_quiet_option
from servepack.errors import UsageError
from servepack.packs.limits import MAX_CONCURRENCY, MAX_COUNT, MAX_TOKENS

if TYPE_CHECKING:  # the commands import what they run when they run: `bench --help` loads no pipeline, no models
    from servepack.bench.summary import BenchSummary


def _pair(a: float | None, b: float | None, digits: int = 1) -> str:
    return f"{fmt(a, digits)} / {fmt(b, digits)}"


def render_summary(s: BenchSummary) -> None:
    rows = []
    for c in s.cells:
        flags = [f for f, on in (("noise-floor", c.noise_floor), ("deferred", c.deferred),
                                 (f"{c.short_outputs} short", c.short_outputs),
                                 (f"{len(c.failures)} failed", c.failures), (c.stopped or "", c.stopped)) if on]
        rows.append([f"{c.context_tokens:,}", str(c.concurrency), str(c.n), f"{c.n_fresh}/{c.n}",
                     fmt(c.ttft_ms.median, 0), fmt(c.prompt_per_ttft_tok_s_client.median),
                     fmt(c.prompt_eval_tok_s_server.median),
                     _pair(c.decode_tok_s_client.median, c.decode_tok_s_server.median),
                     fmt(c.decode_tok_s_aggregate.median), ", ".join(flags)])
    table("server bench (medians; decode client / server)", ["ctx", "conc", "n", "fresh", "TTFT ms",
                                                            "prompt÷TTFT tok/s", "prompt eval tok/s", "decode tok/s",
                                                            "agg decode", "flags"], rows)
    for c in s.cells:
        progress(quality_line(c))
    h = s.host
    if h is not None:
        progress(f"host: {h.samples_contended}/{h.samples} samples contended ({h.policy})"
                 + (f"; biggest others: {', '.join(h.top[:3])}" if h.top else "")
                 + (f"; load {h.load1_min:.2f}–{h.load1_max:.2f}" if h.load1_min is not None
                    and h.load1_max is not None else ""))
    progress(s.prompt_token_report)
    r = s.roofline
    frac = r.fraction_of_ceiling if r else None
    if r is not None and frac is not None:
        progress(f"roofline: {r.bytes_per_token / 1e6:,.0f} MB/token at {r.bandwidth_gbs:,.1f} GB/s "
                 f"({r.bandwidth_source}) → ceiling {r.ceiling_tok_s:,.1f} tok/s; decode at "
                 f"{100 * frac:.0f}% of it")
    for ratio in s.llama_bench_ratio or []:
        progress(f"{ratio.note}: {ratio.ratio:.2f}")
    unavailable = [f"{k} ({v.reason})" for k, v in s.facts.items() if v.state == "unavailable"]
    if unavailable:
        progress("unavailable: " + "; ".join(unavailable))


@click.command("bench")
@click.argument("pack", required=False)
@click.option("--preset", help="Preset to serve (default: the pack's bench.preset).")
@click.option("--base-url", help="Bench a running server instead (e.g. http://127.0.0.1:8080, no /v1).")
@click.option("--model", help="Model name to send to an attached server (with --base-url).")
@click.option("--prompt-tokens", type=click.IntRange(min=1, max=MAX_TOKENS), multiple=True,
              help="Context mark; repeatable.")
@click.option("--gen-tokens", type=click.IntRange(min=1, max=MAX_TOKENS), help="Tokens to generate per request.")
@click.option("--samples", type=click.IntRange(min=1, max=MAX_COUNT),
              help="Measured rounds per cell, a fixed count (default: at least the pack's, more until the 95% "
                   "interval is within the pack's interval_target_pct, at most 20 or 150 s a cell).")
@click.option("--concurrency", type=click.IntRange(min=1, max=MAX_CONCURRENCY), multiple=True,
              help=f"Concurrent streams, 1 to {MAX_CONCURRENCY:,} (no bench opens more; fewer when `ulimit -n` "
                   "is lower, or the preset has fewer slots); repeatable.")
@click.option("--warmup", type=click.IntRange(min=0, max=MAX_COUNT),
              help="Unmeasured requests before each cell (default 0).")
@click.option("--cache-prompt/--no-cache-prompt", default=None,
              help="Send cache_prompt true/false to llama-server (default false: every sample fresh).")
@click.option("--endpoint", type=click.Choice(["chat", "completion"]), help="Chat (default) or raw /completion.")
@click.option("--timeout", "timeout_s", type=FiniteFloat(min=0.1, max=MAX_TIMEOUT_S),
              help="Per-request timeout, seconds.")
@click.option("--llama-bench-json", type=click.Path(dir_okay=False),
              help="A llama_bench.json that `servepack llama-bench` wrote (a regular file, at most 16 MiB), to compare "
                   "server figures with (ratio); read and checked before the server starts.")
@out_option
@server_model_options
@click.option("--json", "as_json", is_flag=True, help="Print server_bench.json on stdout.")
@verify_model_option
@wait_quiet_option
@allow_server_flag_option
def bench_cmd(pack: str | None, preset: str | None, base_url: str | None, model: str | None,
              prompt_tokens: tuple[int, ...], gen_tokens: int | None, samples: int | None,
              concurrency: tuple[int, ...], warmup: int | None, cache_prompt: bool | None, endpoint: str | None,
              timeout_s: float | None, llama_bench_json: str | None, out: Path | None, server_bin: Path | None,
              model_file: Path | None, as_json: bool, wait_quiet_s: float) -> None:
    """Measure TTFT, prefill and decode (client and server), fresh and exact, with memory and statistics."""
    from servepack.pipeline.bench import bench_attach, bench_pack

    overrides: dict[str, Any] = {
        "context_marks": prompt_tokens, "gen_tokens": gen_tokens, "samples": samples, "concurrency": concurrency,
        "warmup": warmup, "cache_prompt": cache_prompt, "endpoint": endpoint, "timeout_s": timeout_s,
        "llama_bench_json": llama_bench_json,
    }
    if base_url:
        if not model:
            raise UsageError("--base-url needs --model NAME (the name the server answers to)")
        if preset or server_bin or model_file:
            raise UsageError("--preset, --server-bin and --model-file launch a server; drop them with --base-url")
        summary, path = bench_attach(base_url, model, pack_ref=pack, out=out,
                                     progress=progress, wait_quiet_s=wait_quiet_s, **overrides)
    else:
        if model:
            raise UsageError("--model names an attached server's model; use it with --base-url")
        summary, path = bench_pack(pack, preset, out=out, progress=progress, server_bin=server_bin,
                                   model_path=model_file, wait_quiet_s=wait_quiet_s, **overrides)
    render_summary(summary)
    progress(f"results → {path} (server_bench.json, requests.jsonl, memory.jsonl)")
    if as_json:
        print_json(summary.model_dump(mode="json"))


@click.command("llama-bench")
@click.argument("pack", required=False)
@click.option("--preset", help="Preset whose flags map to llama-bench's (default: the pack's bench.preset).")
@click.option("-p", "--prompt-tokens", type=click.IntRange(min=1, max=MAX_TOKENS), multiple=True,
              help="pp sizes; repeatable.")
@click.option("-n", "--gen-tokens", type=click.IntRange(min=1, max=MAX_TOKENS), multiple=True,
              help="tg sizes; repeatable.")
@click.option("-r", "--repetitions", type=click.IntRange(min=1, max=MAX_COUNT), help="Repetitions per test.")
@out_option
@click.option("--bench-bin", type=click.Path(path_type=Path), help="llama-bench to run instead of the pin.")
@click.option("--model-file", type=click.Path(path_type=Path), help="GGUF to bench instead of the pin (a twin).")
@click.option("--json", "as_json", is_flag=True, help="Print llama_bench.json on stdout.")
@verify_model_option
def llama_bench_cmd(pack: str | None, preset: str | None, prompt_tokens: tuple[int, ...],
                    gen_tokens: tuple[int, ...], repetitions: int | None, out: Path | None, bench_bin: Path | None,
                    model_file: Path | None, as_json: bool) -> None:
    """Run llama-bench from the pack's engine with the preset's flags; record every sample."""
    from servepack.pipeline.bench import llama_bench_pack

    result, path = llama_bench_pack(pack, preset, out=out, progress=progress, prompt_tokens=prompt_tokens,
                                    gen_tokens=gen_tokens, repetitions=repetitions, bench_bin=bench_bin,
                                    model_path=model_file)
    rows = [[t.kind, str(t.n_prompt), str(t.n_gen), fmt(t.avg_ts, 2), fmt(t.stddev_ts, 2),
             ", ".join(f"{x:.2f}" for x in t.samples_ts)] for t in result.tests]
    table("llama-bench (tok/s)", ["test", "n_prompt", "n_gen", "avg", "stddev", "samples"], rows)
    progress(f"results → {path}/llama_bench.json")
    if as_json:
        print_json(result.model_dump(mode="json"))


COMMANDS: list[click.Command] = [bench_cmd, llama_bench_cmd]
