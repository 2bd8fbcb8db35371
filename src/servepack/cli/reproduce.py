"""`servepack reproduce RECORD [PACK]`: does a registry record's number hold on this machine?"""

from __future__ import annotations

from pathlib import Path

import click

from servepack.cli._options import FiniteFloat, allow_server_flag_option, db_option, out_option
from servepack.cli.render import echo, print_json, progress
from servepack.pipeline.reproduce import LaunchShown, ReproduceOutcome, ReproduceRequest, dry_run, reproduce
from servepack.reproduce import DEFAULT_TOLERANCE_PCT


def render(o: ReproduceOutcome) -> None:
    """Facts first, then the launch and the protocol, then the verdicts and what was not reproduced."""
    echo(f"record {o.original.id}")
    echo(f"  {o.original.source} · sha256 {o.original.sha256}" + (f" · {o.original.origin_url}"
                                                                  if o.original.origin_url else ""))
    if o.original.held:
        echo(f"  {o.original.held}")
    echo(f"pack {o.pack_id or '(none: give PACK to run)'}")
    echo("comparability:")
    for c in o.checks:
        echo(f"  {c.line()}")
    if not o.comparable:
        echo("  → NOT_COMPARABLE: no metric can be claimed REPRODUCED here ("
             + "; ".join(f"{c.what} {c.state}" for c in o.checks if c.state != "same") + ")")
    echo("launch as recorded:")
    for part, value in o.recorded_launch:
        echo(f"  {part}: {value}")
    echo(f"launch here ({o.facts.arguments_where}, fidelity {o.facts.fidelity or 'not stated'}):")
    echo("  " + " ".join(o.argv))
    for r in o.translation.rewrites:
        echo(f"  {r.line()}")
    p = o.protocol
    if p is None:
        echo("protocol: the record states none (no cell in its notes, no speed sweep beside it)")
    else:
        marks = ", ".join(f"{m:,}" for m in p.context_marks)
        echo(f"protocol: context marks {marks} × {p.gen_tokens:,} generated tokens @ concurrency "
             f"{', '.join(map(str, p.concurrency))}; {p.samples or '?'} samples per cell; warmup {p.warmup}; "
             f"{'prompt reuse on' if p.cache_prompt else 'fresh prompts'}")
        for note in p.notes:
            echo(f"  {note}")
        for cell in p.cells:
            figs = "; ".join(f"{m} median {f.median:g}" + (f" (n={len(f.samples)}, {min(f.samples):g}–"
                                                           f"{max(f.samples):g})" if f.samples else "")
                             for m, f in cell.figures.items()) or "no figures"
            echo(f"  record {cell.label}: {figs}")
    if o.dry_run:
        echo("dry run: nothing launched")
        return
    echo(f"verdicts (tolerance ±{o.tolerance_pct:g}% joined with the record's spread):")
    for v in o.verdicts:
        echo(f"  {v.metric:14} {v.cell:28} {v.verdict:15} {v.reason}")
    missing = [v for v in o.verdicts if v.verdict != "REPRODUCED"]
    if missing:
        echo("not reproduced: " + ", ".join(f"{v.metric} at {v.cell} ({v.verdict})" for v in missing))
    echo(f"run → {o.run_dir} (reproduce.json, receipt.json)")
    if o.exported:
        echo(f"registry records → {o.exported[0]} and {o.exported[1]}")
        if len(o.exported) > 2:  # "what to submit" only where it can be submitted as is
            submit = "" if o.export_not_submittable else ", what to submit"
            echo(f"lab run (the registry's format for a CPU box{submit}) → {o.exported[2]}")
        for why in o.export_not_submittable:
            echo(f"not submittable as is: {why}")
    elif o.export_error:
        echo(f"registry export failed: {o.export_error}")


def render_shown(s: LaunchShown) -> None:
    """A record servepack cannot run here: its launch as recorded, every part, and why it would not run."""
    echo(f"record {s.original.id} ({s.kind.replace('_', ' ')})")
    echo(f"  {s.original.source} · sha256 {s.original.sha256}")
    echo("launch as recorded:")
    for part, value in s.launch:
        echo(f"  {part}: {value}")
    echo(f"would not run here: {s.why_not}")
    echo("dry run: nothing launched")


@click.command("reproduce")
@click.argument("record")
@click.argument("pack", required=False)
@click.option("--model-file", type=click.Path(path_type=Path), help="Local GGUF to serve (checked against the "
              "record's model pin); default: the pack's cached model.")
@click.option("--server-bin", type=click.Path(path_type=Path), help="llama-server to launch instead of the pack's.")
@click.option("--dry-run", "dry_run_flag", is_flag=True, help="Print the record's launch as recorded, the translated "
              "launch, protocol and facts (or why it would not run here); launch nothing.")
@click.option("--samples", type=click.IntRange(min=1, max=200), help="Samples per cell (default: the record's).")
@click.option("--tolerance", "tolerance_pct", type=FiniteFloat(min=0, max=100), default=DEFAULT_TOLERANCE_PCT,
              show_default=True, help="±% around the record's median, joined with its spread, that counts as held.")
@out_option
@click.option("--export", "export_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where the registry records of the reproduction go (default: beside the run, <run>.registry).")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@allow_server_flag_option
def reproduce_cmd(record: str, pack: str | None, model_file: Path | None, server_bin: Path | None, dry_run_flag: bool,
                  samples: int | None, tolerance_pct: float, out: Path | None, export_dir: Path | None,
                  db: Path | None, as_json: bool) -> None:
    """Run RECORD's own launch and protocol here (a record file, or an id in the local registry); judge each metric."""
    req = ReproduceRequest(record=record, pack_ref=pack, model_file=model_file, server_bin=server_bin,
                           dry_run=dry_run_flag, samples=samples, tolerance_pct=tolerance_pct, out=out,
                           export=export_dir, db=db)
    outcome = dry_run(req, progress) if dry_run_flag else reproduce(req, progress)
    if as_json:
        print_json(outcome.as_dict())
    elif isinstance(outcome, LaunchShown):
        render_shown(outcome)
    else:
        render(outcome)


COMMANDS: list[click.Command] = [reproduce_cmd]
