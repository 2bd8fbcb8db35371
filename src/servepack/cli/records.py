"""`servepack verify`, `registry export|check|show`, `servepack compare` (import|list|choose: registry_db.py)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from servepack.cli._options import FiniteFloat, db_option
from servepack.cli.render import echo, echo_block, print_json, progress
from servepack.errors import VerificationError
from servepack.reproduce import DEFAULT_TOLERANCE_PCT
from servepack.safepath import names_something

if TYPE_CHECKING:
    from servepack.reproduce.verdict import Judgement

# Each command imports what it runs when it runs (runs, comparisons, the export, the registry's checks): `registry
# list` and `registry import`, whose group this module holds, load none of it.

DirPath = click.Path(exists=True, file_okay=False, path_type=Path)


@click.command("verify")
@click.argument("run_dir", type=DirPath)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
def verify_cmd(run_dir: Path, as_json: bool) -> None:
    """Recompute every hash in receipt.json and every summary figure from the raw files; exit 1 on a mismatch."""
    from servepack.records.verify import verify_run

    progress(f"verifying {run_dir}")
    report = verify_run(run_dir)
    if report.receipt_elsewhere:
        progress(f"the run could not write its receipt into {run_dir} (its directory was not writable); read it "
                 f"from {report.receipt_path}")
    if report.status != "complete":
        progress(f"the run ended {report.status}: {report.error or 'no reason recorded'}")
    if as_json:
        print_json(report.as_dict())
    else:
        for m in report.mismatches:
            echo(f"MISMATCH {m.line()}")
        if report.ok:
            echo(f"ok {run_dir}: {report.files_checked} files hashed, {report.figures_checked} figures "
                 f"recomputed, run {report.run_id}")
    report.raise_for_mismatch()


@click.group("registry")
def registry_group() -> None:
    """local-ai-registry/v1 records: export, show; the local registry database: import, list, choose."""


@registry_group.command("export")
@click.argument("run_dir", type=DirPath)
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder in the registry's layout (recipe/, speed-sweep/, hardware/, model-instance/, model/), "
                   "outside the run directory; records from earlier exports there are kept and checked too.")
@click.option("--json", "as_json", is_flag=True, help="Print the written paths as JSON.")
def registry_export(run_dir: Path, out: Path, as_json: bool) -> None:
    """Write a run as local-ai-registry records, refused unless the whole folder passes the registry's rules."""
    from servepack.registry.export import export_run
    from servepack.registry.format.check import catalog

    res = export_run(run_dir, out)
    progress(f"checked against {catalog().target}")
    for gap in res.gaps:
        progress(f"not submittable as is: {gap.line()} (the run cannot state it truthfully)")
    if as_json:
        print_json({"recipe": str(res.recipe), "speed_sweep": str(res.speed_sweep),
                    "lab_run": str(res.lab_run) if res.lab_run else None,
                    "written": {k: str(v) for k, v in res.written.items()}, "unchanged": list(res.unchanged),
                    "hardware": {"id": res.hardware_id, "how": res.hardware_how,
                                 "published_card": res.hardware_published},
                    "submittable": res.submittable,
                    "not_submittable": [g.line() for g in res.gaps]
                    + ([f"{res.lab_run}: {res.card_problem}"] if res.lab_run and res.card_problem else [])})
    else:
        if res.lab_run and res.card_problem:
            echo(f"lab run     {res.lab_run} (a CPU box: the registry's lab format carries it; not submittable as "
                 f"is: {res.card_problem})")
        elif res.lab_run:
            echo(f"lab run     {res.lab_run} (a CPU box: the registry's lab format carries it; submit this)")
        echo(f"recipe      {res.recipe}")
        echo(f"speed sweep {res.speed_sweep}")
        for rel, path in res.written.items():
            if path not in (res.recipe, res.speed_sweep, res.lab_run):
                echo(f"{rel.split('/')[0]:11} {path}")
        if res.lab_run is None:  # the hardware the records name: a published card, or the record this export carries
            card = "one of the registry's cards" if res.hardware_published else \
                "not one of the registry's cards; the export carries its hardware record"
            echo(f"card        {res.hardware_id} ({card}: {res.hardware_how})")
            if res.submittable:
                echo("submit this: every record passes the registry's rules, the references between them included")


@registry_group.command("check")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the problems as JSON.")
def registry_check(folder: Path, as_json: bool) -> None:
    """Apply the registry's published rules to an export folder; exit 1 naming each record and field that fails."""
    from servepack.registry.format.check import catalog, check_folder

    problems = check_folder(folder)
    if as_json:
        print_json({"folder": str(folder), "target": catalog().target,
                    "problems": [{"file": p.file, "field": p.field, "message": p.message} for p in problems]})
    else:
        for p in problems:
            echo(f"FAIL {p.line()}")
        if not problems:
            echo(f"ok {folder}: passes the rules of {catalog().target}")
    if problems:
        raise VerificationError(f"{folder}: {len(problems)} problem(s) against the registry's rules; first: "
                                f"{problems[0].line()}")


def _pairs(d: object) -> str:
    """A record's object as `name value` pairs (never Python's dict repr)."""
    if not isinstance(d, dict):
        return str(d)
    return ", ".join(f"{k} {'null' if v is None else str(v).lower() if isinstance(v, bool) else v}"
                     for k, v in d.items()) or "none stated"


def _show_text(s: dict[str, Any]) -> None:
    if "registry" in s:
        held, first = s["registry"], s["registry"]["sources"][0]
        echo(f"held in the registry as version {held['version']} of {held['versions']}: imported from "
             f"{first['source']} at {first['imported_at']} (sha256 {first['sha256'][:12]}…)")
    for note in s.get("normalised", []):
        echo(f"  read as: {note}")
    if s["kind"] not in ("recipe", "speed_sweep"):
        echo(f"{s['kind'].replace('_', ' ')} {s['id']}")
        echo_block(json.dumps(s["record"], indent=2, ensure_ascii=False))
        if s["kind"] == "lab_recipe":
            _show_lab_launch(s)
        return
    if s["kind"] == "speed_sweep":
        when = s["measured_at"] or "at an unstated time"
        echo(f"speed sweep {s['id']} (recipe {s['recipe_id']}) measured {when}")
        for row in s["rows"]:
            echo(f"  ctx {row['context_tokens']} × {row['output_tokens']} gen @c{row['concurrency']}: prefill "
                 f"{row['prefill_tok_s']} tok/s · decode {row['decode_tok_s']} tok/s · TTFT p50 "
                 f"{row['ttft_ms_p50']} ms · samples {row['samples']} · {row['status']}")
        return
    echo(f"recipe {s['id']} ({s['status']}, source {s['recipe_source']}, launch {s['launch_kind']})")
    echo(f"  model instance {s['model_instance_id']} · hardware {s['hardware_id']} ×{s['hardware_count']} · "
         f"engine {s['engine']['name']} {s['engine']['version']}")
    echo(f"  serving {_pairs(s['serving'])} · capabilities {_pairs(s['capabilities'])}")
    echo("  launch as recorded:")
    for part in s["launch_as_recorded"]:
        echo(f"    {part['part']}: {part['value']}")
    if s["observed_command"]:
        cmd = s["observed_command"]
        shown = cmd.get("command") or " ".join(cmd.get("arguments") or []) or "no argv"
        echo(f"  observed command ({cmd.get('fidelity') or 'fidelity not stated'}): {shown}")
    for name, reason in s["facts_not_known"].items():
        echo(f"  not known: {name} ({reason})")
    for sample in s["samples"]:
        check = "" if sample["consistent"] else f" ≠ recomputed {sample['median_recomputed']}"
        values = ", ".join(f"{v:g}" for v in sample["samples"])
        echo(f"  {sample['metric']}: n={sample['n']} [{values}] median {sample['median_stated']:g}{check}")


def _show_lab_launch(s: dict[str, Any]) -> None:
    """A lab recipe's launch as the lab renders it from its engine profile, or why it is not shown."""
    launch = s.get("launch")
    skipped = [f"  {line}" for line in s.get("launch_profile_skipped") or []]  # passed over beside the file
    if not launch:
        echo(f"launch: {s['launch_notice']}")
        for line in skipped:
            echo(line)
        return
    where = f"in image {launch['image']}" if launch["image"] else f"on the host ({launch['launched']})"
    echo(f"launch, rendered from {launch['shape']} engine profile {launch['profile']} (lab.py render):")
    if s.get("launch_profile"):  # a recipe shown from its file: the profile found beside it
        echo(f"  profile from {s['launch_profile']['path']} (sha256 {s['launch_profile']['sha256'][:12]}…)")
    for line in skipped:
        echo(line)
    program = launch["program"] or "(the image's own entrypoint)"
    echo(f"  program {program} {where}")
    echo(f"  args {shlex.join(launch['args'])}")
    echo(f"  {s['launch_settings']}")
    echo(f"  ctx {launch['ctx']:,} · seqs {launch['seqs']} · vision {str(launch['vision']).lower()}")
    if launch["weights_at"]:
        echo(f"  weights {launch['weights']} at {launch['weights_at']}")
    config = launch["config"]
    if config:
        echo(f"  config {config['at'] or '(no place stated)'} (sha256 {config['sha256'][:12]}…):")
        for line in config["text"].splitlines():
            echo(f"    {line}")


@registry_group.command("show")
@click.argument("ref", metavar="ID|FILE")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def registry_show(ref: str, db: Path | None, as_json: bool) -> None:
    """Read a record file (stored form or API envelope) or a registry id, validate it, print what it says."""
    from servepack.registry import resolve
    from servepack.registry.format import summary

    loaded, held = resolve(ref, db)
    s = summary(loaded)
    if held is not None:
        s["registry"] = held.as_dict()
    if as_json:
        print_json(s)
    else:
        _show_text(s)


def _judgement_text(j: Judgement) -> None:
    """The facts first (`! ` before each that is not the same), then one verdict per record cell and metric."""
    for c in j.checks:
        echo(f"{'  ' if c.state == 'same' else '! '}{c.line()}")
    if not j.comparable:
        echo("→ NOT_COMPARABLE: no metric can be claimed REPRODUCED ("
             + "; ".join(f"{c.what} {c.state}" for c in j.checks if c.state != "same") + ")")
    for note in j.protocol_notes:
        echo(f"  protocol: {note}")
    echo(f"verdicts (tolerance ±{j.tolerance_pct:g}% joined with the record's spread):")
    for v in j.verdicts:
        echo(f"{v.metric:14} {v.cell:28} {v.verdict:15} {v.reason}")


@click.command("compare")
@click.argument("base", type=click.Path(exists=True, path_type=Path))
@click.argument("candidate", metavar="CANDIDATE|RECORD|ID")
@click.option("--pack", "pack_ref", default=None, help="Pack whose claims policy decides (default: BASE's pack).")
@click.option("--tolerance", "tolerance_pct", type=FiniteFloat(min=0.0, max=100.0), default=DEFAULT_TOLERANCE_PCT,
              show_default=True, help="A run against a record: ± percent around the record's median, joined with its "
                                      "spread, that still counts as REPRODUCED (as `reproduce --tolerance`).")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def compare_cmd(base: Path, candidate: str, pack_ref: str | None, tolerance_pct: float, db: Path | None,
                as_json: bool) -> None:
    """BASE and CANDIDATE run dirs → PROMOTE / DO_NOT_PROMOTE / INCONCLUSIVE; a run and a record (a file or a
    registry id) → the facts, then REPRODUCED / FASTER / SLOWER / NOT_COMPARABLE per cell and metric.

    A run and a record are judged as `reproduce` and the report judge them (`reproduce.verdict`)."""
    from servepack.packs import load_pack
    from servepack.records.claims import load_run, pack_of
    from servepack.records.compare import compare_runs

    if not (names_something(Path(candidate)) and Path(candidate).is_dir()):
        from servepack.pipeline.reproduce import compare_to_record  # a session's imports: only when judging a record

        judged = compare_to_record(base, candidate, db, tolerance_pct)
        if as_json:
            print_json(judged.as_dict())
        else:
            _judgement_text(judged)
        return
    pack = load_pack(pack_ref).pack if pack_ref else pack_of(load_run(base).receipt)
    progress(f"comparing {candidate} against {base} under {pack.id}'s promotion metrics "
             f"{list(pack.claims.promotion_metrics)}")
    cmp = compare_runs(base, Path(candidate), pack)
    if as_json:
        print_json(cmp.as_dict())
        return
    for line in cmp.differences:
        echo(f"! {line}")
    for m in cmp.metrics:
        ci = m.ci
        figures = (f"×{ci.ratio:.3f} [95% CI {ci.low:.3f}–{ci.high:.3f}] {ci.base_median:.2f} → {ci.cand_median:.2f}"
                   if ci else "no samples")
        promo = " (promotion metric)" if m.promotion else ""
        echo(f"{m.cell:28} {m.metric:14} {m.source:6} {figures} · {m.verdict}{promo}")
    echo(f"decision: {cmp.decision}")
    for reason in cmp.reasons:
        echo(f"  because {reason}")


COMMANDS = [verify_cmd, registry_group, compare_cmd]
