"""`servepack tune`: find the best llama-server flags for a pack on this machine, under guards."""

from __future__ import annotations

import re
from pathlib import Path

import click

from servepack import settings
from servepack.cli._options import (
    MAX_TIMEOUT_S,
    Duration,
    FiniteFloat,
    allow_server_flag_option,
    out_option,
    server_model_options,
    verify_model_option,
)
from servepack.cli.render import fmt, print_json, progress, table
from servepack.errors import UsageError
from servepack.pipeline.tune import TuneOutcome, TuneRequest, result_doc, tune

BUDGET_TIME = Duration(settings.WEEK_S, positive=True)


def parse_duration(text: str) -> float:
    """`--budget-time`: a duration in the one grammar (`settings.parse_duration`: 600, 90s, 30m, 1.5h), more than 0
    to 1 week; anything else is a usage error saying which (out of range, with the range, or not a duration)."""
    try:
        return settings.parse_duration(text, most_s=BUDGET_TIME.most_s, positive=BUDGET_TIME.positive)
    except settings.DurationError as exc:
        raise UsageError(f"--budget-time {exc}") from None


def render(o: TuneOutcome) -> None:
    rows = []
    for t in o.trials:
        f = t.figures.get(o.plan.objective.metric)
        ttft = t.figures.get("ttft_ms")
        ci = (f"{fmt(f.ci95_low, 2)}–{fmt(f.ci95_high, 2)}" if f and f.ci95_low is not None and f.ci95_high is not None
              else "n < 5" if f else "—")
        # One flag a line: a wrapped "batch-size=102 / 4" misreads as two values.
        rows.append([str(t.trial), t.phase, t.key.replace(" ", "\n") if t.key else "(base preset)", t.status,
                     fmt(f.median if f else None, 2), ci,
                     fmt(ttft.median if ttft else None, 0), (t.reason or "")[:60]])
    table(f"tune trials ({o.plan.objective.metric}, medians)",
          ["#", "phase", "configuration", "status", "median", "95% CI", "TTFT ms", "reason"], rows)
    if o.pruned:
        progress("pruned in the race: " + "; ".join(o.pruned))
    if o.best is not None:
        lo, hi = o.best.ci
        progress(f"best: {o.best.key or '(base preset)'} · {o.best.median:.2f} [95% CI {lo:.2f}–{hi:.2f}] over "
                 f"{o.best.trials} trial(s)")
    progress(f"decision: {o.decision}")
    for reason in o.reasons:
        progress(f"  {reason}")
    if o.preset_written:
        progress(f"preset {o.preset_written!r} written to {o.pack_file}")
    progress(f"results → {o.tune_dir} (tune.json, trials.jsonl, trials/, compare/, tune_result.json)")


@click.command("tune")
@click.argument("pack", required=False)
@click.option("--preset", help="Base preset to tune from (default: the pack's headline preset).")
@click.option("--space", "space_file", type=click.Path(path_type=Path),
              help="TOML file with a [tune] table: flag = [values] or { min, max, step }.")
@click.option("--budget-trials", type=click.IntRange(min=1, max=1000), help="Most trials (fresh servers) to run.")
@click.option("--budget-time", "budget_time_s", type=BUDGET_TIME,
              help=f"Stop starting trials after this long ({BUDGET_TIME.range_text}; e.g. 600, 30m, 1h).")
@click.option("--objective", "metric", type=click.Choice(["decode_tok_s", "prefill_tok_s", "ttft_ms"]),
              help="Metric to optimise (default: the pack's claims headline).")
@click.option("--max-ttft-ms", type=FiniteFloat(min=0.001, max=MAX_TIMEOUT_S * 1000),
              help="A trial with a higher median TTFT is infeasible.")
@click.option("--samples", type=click.IntRange(min=1, max=100), default=3, show_default=True,
              help="Measured requests per trial.")
@click.option("--confirm-samples", type=click.IntRange(min=1, max=200),
              help="Requests per side in the final compare (default: the pack's bench samples).")
@click.option("--seed", type=click.IntRange(min=0, max=2**31 - 1), default=0, show_default=True,
              help="Seed of the search.")
@server_model_options
@click.option("--resume", type=click.Path(path_type=Path, file_okay=False), help="Continue the tune in DIR.")
@out_option
@click.option("--write-pack", type=click.Path(path_type=Path, dir_okay=False),
              help="User pack file to add the best preset to (created from the pack if missing; never a shipped one).")
@click.option("--preset-name", default="tuned", show_default=True, help="Name of the written preset.")
@click.option("--json", "as_json", is_flag=True, help="Print tune_result.json on stdout.")
@verify_model_option
@allow_server_flag_option
def tune_cmd(pack: str | None, preset: str | None, space_file: Path | None, budget_trials: int | None,
             budget_time_s: float | None, metric: str | None, max_ttft_ms: float | None, samples: int,
             confirm_samples: int | None, seed: int, server_bin: Path | None, model_file: Path | None,
             resume: Path | None, out: Path | None, write_pack: Path | None, preset_name: str, as_json: bool) -> None:
    """Search llama-server flags (a fresh server per trial), race the best, compare with the base preset."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,63}", preset_name):
        raise UsageError(f"--preset-name {preset_name!r}: lower-case letters, digits, '-' and '_' only")
    if resume is not None and pack is not None:
        raise UsageError("--resume continues the tune's own pack; drop the PACK argument")
    req = TuneRequest(pack_ref=pack, preset=preset, space_file=space_file, budget_trials=budget_trials,
                      budget_time_s=budget_time_s,
                      metric=metric,  # type: ignore[arg-type]
                      max_ttft_ms=max_ttft_ms, samples=samples, confirm_samples=confirm_samples, seed=seed,
                      server_bin=server_bin, model_file=model_file, resume=resume, out=out, write_pack=write_pack,
                      preset_name=preset_name)
    outcome = tune(req, progress)
    render(outcome)
    if as_json:
        print_json(result_doc(outcome))


COMMANDS: list[click.Command] = [tune_cmd]
