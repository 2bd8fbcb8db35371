"""`servepack run`: the main job — with no PACK, the embedded default."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from servepack.cli._options import Duration, allow_server_flag_option, out_option, verify_model_option
from servepack.cli.render import echo, fmt, print_json, progress, table
from servepack.packs.limits import MAX_COUNT, MAX_TOKENS

if TYPE_CHECKING:  # the command imports what it runs when it runs: `--help` loads no pipeline, no models
    from servepack.bench.summary import Cell
    from servepack.pipeline import RunOutcome

F = TypeVar("F", bound=Callable[..., Any])


def wait_quiet_option(f: F) -> F:
    """`--wait-quiet DURATION`: before measuring, wait up to this long for a quiet host (default: warn, go on)."""
    kind = Duration()
    return click.option(
        "--wait-quiet", "wait_quiet_s", type=kind, default="0", show_default=True,
        help=f"Before measuring, wait up to this long ({kind.range_text}, e.g. 60s) for other processes to leave "
             "the CPU; a busy host is always reported, and samples taken while it is busy are marked contended.",
    )(f)


@click.command("run")
@click.argument("pack", required=False)
@click.option("--preset", help="Preset to serve (default: the pack's bench preset).")
@out_option
@click.option("--server-bin", type=click.Path(path_type=Path), help="llama-server to use instead of the pin.")
@click.option("--model", "model_path", type=click.Path(path_type=Path), help="Model file instead of the pin.")
@click.option("--claim", is_flag=True, help="Enforce the pack's claim conditions; refuse when one fails.")
@click.option("--suite", "suites", multiple=True, help="Smoke suite (repeatable; default: the pack's list).")
@click.option("--no-smoke", is_flag=True, help="Skip the smoke suites.")
@click.option("--samples", type=click.IntRange(min=1, max=MAX_COUNT),
              help="Measured rounds per cell, a fixed count (default: at least the pack's, more until the 95% "
                   "interval is within the pack's interval_target_pct, at most 20 or 150 s a cell).")
@click.option("--prompt-tokens", "marks", type=click.IntRange(min=1, max=MAX_TOKENS), multiple=True,
              help="Context mark (repeatable; default: pack's).")
@click.option("--gen-tokens", type=click.IntRange(min=1, max=MAX_TOKENS),
              help="Generated tokens per request (default: the pack's).")
@click.option("--case", "case_ids", multiple=True, help="Only these smoke case ids (repeatable; one suite).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
@click.option("--dry-run", is_flag=True, help="Print the engine's argv for the preset and launch nothing.")
@verify_model_option
@wait_quiet_option
@allow_server_flag_option
def run_cmd(pack: str | None, preset: str | None, out: Path | None, server_bin: Path | None,
            model_path: Path | None, claim: bool, suites: tuple[str, ...], no_smoke: bool, samples: int | None,
            marks: tuple[int, ...], gen_tokens: int | None, case_ids: tuple[str, ...], as_json: bool,
            wait_quiet_s: float, dry_run: bool) -> None:
    """Serve the pack, measure it, smoke-test it, and record a receipt and MEASURED.md."""
    from servepack.pipeline import run_pack
    from servepack.pipeline.dryrun import plan_launch
    from servepack.plan import RunOptions

    if dry_run:
        plan = plan_launch(pack, preset, server_bin=server_bin, model_path=model_path)
        for note in plan.notes:
            progress(note)
        if as_json:
            print_json({"pack": plan.pack_id, "preset": plan.preset, "engine": plan.engine, "argv": plan.argv})
        else:
            echo(shlex.join(plan.argv))
        return
    t0 = time.monotonic()
    chosen = [] if no_smoke else (list(suites) or None)
    overrides = {"samples": samples, "context_marks": marks, "gen_tokens": gen_tokens}
    outcome = run_pack(pack, preset, RunOptions(out=out, server_bin=server_bin, model_path=model_path, claim=claim,
                                                progress=progress),
                       suites=chosen, case_ids=list(case_ids), bench_overrides=overrides, wait_quiet_s=wait_quiet_s)
    wall = time.monotonic() - t0
    _render(outcome, wall)
    if as_json:
        print_json(_summary(outcome, wall))
    else:
        echo(str(outcome.results_dir))


def _summary(o: RunOutcome, wall: float) -> dict[str, object]:
    cells = [c.model_dump(mode="json") for c in o.bench.cells] if o.bench else []
    return {
        "results_dir": str(o.results_dir),
        "wall_s": round(wall, 1),
        "bench_cells": cells,
        "smoke": {s.suite: {"n": s.n, "strict": s.strict_passed, "lenient": s.lenient_passed} for s in o.smoke},
        "claim_eligible": o.receipt.claim.eligible if o.receipt else None,
        "claim_reasons": o.receipt.claim.reasons if o.receipt else None,
        "measured": str(o.measured) if o.measured else None,
    }


def quality_line(c: Cell) -> str:
    """One line per cell under the table: the interval reached and why sampling stopped, the host, stalls."""
    host = "host not watched" if c.contended is None else (
        f"{c.n_clean} clean, {c.set_aside_text()}" if c.n_set_aside else
        f"host contended in {c.contended}/{c.n} samples" if c.contended else f"host quiet in all {c.n} samples")
    interval = c.interval.note if c.interval else c.decode_tok_s_server.interval_text()
    stalls = f" · {c.stalls} stalled" if c.stalls and not c.n_set_aside else ""
    return f"ctx {c.context_tokens:,} × c{c.concurrency}: {interval} · {host}{stalls}"


def _render(o: RunOutcome, wall: float) -> None:
    rows = []
    for c in o.bench.cells if o.bench else []:
        rows.append([
            f"{c.context_tokens} × c{c.concurrency}",
            fmt(c.prompt_per_ttft_tok_s_client.median), fmt(c.prompt_eval_tok_s_server.median),
            f"{fmt(c.decode_tok_s_client.median)} / {fmt(c.decode_tok_s_server.median)}",
            fmt(c.ttft_ms.median, 0, " ms"),
            f"{c.n_fresh}/{c.n}",
        ])
    table("bench (medians; decode client / server)", ["prompt", "prompt÷TTFT tok/s", "prompt eval tok/s",
                                                      "decode tok/s", "TTFT", "fresh"], rows)
    for c in o.bench.cells if o.bench else []:
        progress(quality_line(c))
    if o.smoke:
        table("smoke", ["suite", "strict", "lenient", "duration"],
              [[s.suite, f"{s.strict_passed}/{s.n}", f"{s.lenient_passed}/{s.n}", fmt(s.duration_s, 1, " s")]
               for s in o.smoke])
    if o.receipt:
        claim = "eligible" if o.receipt.claim.eligible else "ineligible (" + "; ".join(o.receipt.claim.reasons) + ")"
        progress(f"hardware {o.receipt.hardware.attributed_id} · claim {claim}")
    progress(f"wall time {wall:.0f} s · results {o.results_dir}")


COMMANDS = [run_cmd]
