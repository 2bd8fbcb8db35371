"""`servepack capacity`: how much load the server serves within its SLOs, and where the knee is."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from servepack.bench.capacity import PointStats, parse_slos
from servepack.bench.config import MAX_CONCURRENCY
from servepack.bench.load import MAX_REQUESTS, MAX_WORKERS
from servepack.bench.shapes import SHAPES, shape_for
from servepack.bench.sweep import CapacityResult
from servepack.cli._options import (
    MAX_SEED,
    MAX_TIMEOUT_S,
    Duration,
    FiniteFloat,
    allow_server_flag_option,
    out_option,
    server_model_options,
    verify_model_option,
)
from servepack.cli.render import fmt, print_json, progress, table
from servepack.errors import UsageError, VerificationError
from servepack.packs.schema import MAX_STREAMS, MAX_TOKENS
from servepack.pipeline.capacity import (
    capacity_attach,
    capacity_pack,
    load_settings,
    order_refusal,
    result_lines,
)


def render(r: CapacityResult) -> None:
    """The sweep in 80 columns: the columns a shape has no figure for (rate, cache_n, stopped) are left out."""
    pts = sorted(r.points, key=lambda p: p.level)
    optional: list[tuple[str, Callable[[PointStats], str], bool]] = [
        ("rate/s", lambda p: fmt(p.rate_achieved, 2), any(p.rate_achieved is not None for p in pts)),
        ("lag p99 ms", lambda p: fmt(p.launch_lag_p99_ms, 1) + (" CLIENT" if p.client_limited else ""),
         any(p.launch_lag_p99_ms is not None for p in pts)),
        ("cache_n", lambda p: fmt(p.cache_n_median, 0), shape_for(r.settings.shape).warm),
        ("stopped", lambda p: p.stopped or "", any(p.stopped for p in pts)),
    ]
    shown = [(name, cell) for name, cell, present in optional if present]
    rows = []
    for p in pts:
        t = p.throughput
        rows.append([f"{p.level:g}", "yes" if p.passed else "no", *(fmt(v, 1) for v in p.slo_values.values()),
                     fmt(p.goodput_rps, 2), fmt(t.decode_tok_s_per_stream), fmt(t.decode_tok_s_concurrent),
                     fmt(t.output_tok_s_wall), f"{p.n_ok}/{p.n}", *(cell(p) for _, cell in shown)])
    table(f"capacity sweep ({r.settings.shape}; level = {r.level_unit}; tok/s: decode per stream, sum of the "
          "streams, output ÷ wall time)",
          ["level", "SLOs", *[s.text for s in r.slos], "goodput r/s", "per stream", "sum", "wall", "ok",
           *(name for name, _ in shown)], rows)
    for line in result_lines(r):
        progress(line)


@click.command("capacity")
@click.argument("pack", required=False)
@click.option("--slo", "slos", multiple=True, required=True,
              help="An SLO, METRIC_pQ=VALUE: ttft_p90=2s, e2e_p50=1500ms, decode_p10=10 (tok/s per stream); "
                   "repeatable, every one must hold.")
@click.option("--shape", type=click.Choice(list(SHAPES)), default="closed", show_default=True,
              help="; ".join(f"{name}: {shape.help}" for name, shape in SHAPES.items()) + ".")
@click.option("--arrivals", type=click.Choice(["constant", "poisson"]), help="Open loop: arrival process.")
@click.option("--max-concurrency", type=click.IntRange(min=1, max=MAX_CONCURRENCY), default=16, show_default=True,
              help=f"Closed/agent: the most streams or sessions the search tries (1 to {MAX_CONCURRENCY:,}; fewer when "
                   "`ulimit -n` is lower).")
@click.option("--max-rate", type=FiniteFloat(min=0.01, max=10_000), default=8.0, show_default=True,
              help="Open: the highest arrival rate (requests/s) the search tries.")
@click.option("--start", "start_level", type=FiniteFloat(min=0.01, max=10_000), help="First level tried (default 1).")
@click.option("--rate-step", type=FiniteFloat(min=0.01, max=1), default=0.1, show_default=True,
              help="Open: bisection stops when the bracket is this fraction of the rate.")
@click.option("--duration", "duration_s", type=Duration(positive=True),
              help="Per point: no request sent after this (more than 0 to 1 hour; default 60s).")
@click.option("--requests", "max_requests", type=click.IntRange(min=1, max=MAX_REQUESTS),
              help=f"Per point: requests at most (1 to {MAX_REQUESTS:,}; default 200).")
@click.option("--prompt-tokens", type=click.IntRange(min=1, max=MAX_TOKENS),
              help="Prompt tokens per request (default 256).")
@click.option("--gen-tokens", type=click.IntRange(min=1, max=MAX_TOKENS),
              help="Tokens generated per request (default 64).")
@click.option("--turns", type=click.IntRange(min=1, max=64), help="Agent: turns per session (default 4).")
@click.option("--seed", type=click.IntRange(min=0, max=MAX_SEED),
              help="Seed of the Poisson arrivals and the prompt nonces.")
@click.option("--timeout", "timeout_s", type=FiniteFloat(min=0.1, max=MAX_TIMEOUT_S),
              help="Per-request timeout, seconds (120).")
@click.option("--client-workers", "workers", type=click.IntRange(min=1, max=MAX_WORKERS),
              help="Client processes a closed or open point's streams/arrivals are spread over (default 1); for "
                   "loads one process cannot hold (see the lag p99 column).")
@click.option("--client-lag-bound", "client_lag_bound_ms", type=FiniteFloat(min=0.1, max=60_000),
              help="Launch lag p99 (ms) above which a point is client-limited (default 10, or 5% of the "
                   "tightest TTFT SLO bound when that is larger).")
@click.option("--preset", help="Preset to serve (default: parallel4 when the pack has it, else its bench preset).")
@click.option("--base-url", help="Sweep a running server on loopback instead (e.g. http://127.0.0.1:8080).")
@click.option("--model", help="Model name to send to an attached server (with --base-url).")
@click.option("--slots", type=click.IntRange(min=1, max=MAX_STREAMS),
              help="Attached server's slots when it has no /props.")
@click.option("--fresh-server-per-point", "fresh_server", is_flag=True,
              help="Run every point after the first on a fresh server (servepack starts it; the start is outside "
                   "the point's timing): nothing a point leaves in the server reaches the next.")
@out_option
@server_model_options
@click.option("--json", "as_json", is_flag=True, help="Print capacity.json on stdout.")
@verify_model_option
@allow_server_flag_option
def capacity_cmd(pack: str | None, slos: tuple[str, ...], shape: str, arrivals: str | None, max_concurrency: int,
                 max_rate: float, start_level: float | None, rate_step: float, duration_s: float | None,
                 max_requests: int | None, prompt_tokens: int | None, gen_tokens: int | None, turns: int | None,
                 seed: int | None, timeout_s: float | None, workers: int | None, client_lag_bound_ms: float | None,
                 preset: str | None, base_url: str | None,
                 model: str | None, slots: int | None, out: Path | None, server_bin: Path | None,
                 model_file: Path | None, as_json: bool, fresh_server: bool = False) -> None:
    """Find the highest load meeting every SLO (bracket, then bisect), its goodput, the knee and the limit."""
    parsed = parse_slos(slos)
    load_shape = shape_for(shape)
    if arrivals and not load_shape.scheduled:
        scheduled = " or ".join(f"--shape {name}" for name, s in SHAPES.items() if s.scheduled)
        raise UsageError(f"--arrivals sets the open loop's arrival process; use it with {scheduled}")
    if duration_s is not None and duration_s <= 0:
        raise UsageError("--duration: a point needs a positive duration (e.g. 30s)")
    settings = load_settings(shape=shape, arrivals=arrivals, duration_s=duration_s, max_requests=max_requests,
                             prompt_tokens=prompt_tokens, gen_tokens=gen_tokens, turns=turns, seed=seed,
                             timeout_s=timeout_s, client_lag_bound_ms=client_lag_bound_ms, workers=workers)
    max_level = float(max_concurrency) if load_shape.counts_streams else max_rate
    if start_level is not None and start_level > max_level:
        raise UsageError(f"--start {start_level:g} is above the maximum {max_level:g}; lower it or raise the max")
    if base_url:
        if not model:
            raise UsageError("--base-url needs --model NAME (the name the server answers to)")
        if preset or server_bin or model_file:
            raise UsageError("--preset, --server-bin and --model-file launch a server; drop them with --base-url")
        if fresh_server:
            raise UsageError("--fresh-server-per-point starts servepack's own server for each point; an attached "
                             "server is restarted by whoever runs it: drop the flag with --base-url")
        result, path = capacity_attach(base_url, model, settings=settings, slos=parsed, max_level=max_level,
                                       out=out, progress=progress, start_level=start_level, rel_step=rate_step,
                                       slots=slots)
    else:
        if model or slots:
            raise UsageError("--model and --slots describe an attached server; use them with --base-url")
        result, path = capacity_pack(pack, preset, settings=settings, slos=parsed, max_level=max_level, out=out,
                                     progress=progress, start_level=start_level, rel_step=rate_step,
                                     server_bin=server_bin, model_path=model_file, fresh_server=fresh_server)
    render(result)
    progress(f"results → {path} (capacity.json, capacity_requests.jsonl/.csv, capacity_sweep_rows.json, SVGs)")
    if as_json:
        print_json(result.model_dump(mode="json"))
    refusal = order_refusal(result, launched=not base_url)
    if refusal:
        raise VerificationError(refusal)


COMMANDS: list[click.Command] = [capacity_cmd]
