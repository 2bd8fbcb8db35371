"""`servepack registry import|list|choose`: the local registry database (servepack.registry)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from servepack.cli._options import db_option
from servepack.cli.records import registry_group
from servepack.cli.render import echo, echo_lines, error_line, print_json, progress
from servepack.packs.limits import MAX_TOKENS
from servepack.registry.db import RegistryDB, default_db_path
from servepack.registry.ingest import ImportResult, SomeRefused, check_named, import_paths
from servepack.registry.queries import Listed
from servepack.registry.recipe_facts import DEFAULT_CONTEXT

if TYPE_CHECKING:
    from servepack.registry.choose import Choice, Figure

# `registry choose` and `--hardware detected` import what they run when they run (the checks, this host's facts and
# engines): `registry list` and `import` load none of it.

MARK = {True: "ok", False: "NO", None: "??"}


def _hardware(value: str | None) -> str | None:
    if value != "detected":
        return value
    from servepack.host.fingerprint import detected_hardware_id, fingerprint

    return detected_hardware_id(fingerprint())


@registry_group.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print every file's outcome and the counts as JSON.")
def registry_import(paths: tuple[Path, ...], db: Path | None, as_json: bool) -> None:
    """Import record files and folders (walked for *.json) into the registry database, each file on its own.

    Every record kind the local-ai-registry defines (recipes, speed sweeps, benchmarks, hardware, models, model
    instances; lab recipes, lab runs, engine profiles), stored or as API envelopes, servepack's exports, or a whole
    checkout of the registry. Each file that breaks the registry's own rules is refused with one line naming the
    rule, the rest imported; exit 1 when any file was refused, 0 otherwise. A PATH that does not exist is a wrong
    argument: nothing is imported, the database is not opened, exit 2.
    """
    path = db or default_db_path()
    check_named(paths)

    def say(result: ImportResult) -> None:
        if as_json:
            return
        if result.outcome == "refused":
            error_line("servepack: ", result.line())
        else:
            echo(result.line())

    with RegistryDB.open(path, create=True) as opened:
        summary = import_paths(opened, paths, say)
    if as_json:
        print_json(summary.as_dict())
    else:
        echo(summary.line())
    if summary.refused:
        raise SomeRefused(f"{summary.refused} of {len(summary.results)} files refused (each named above with the "
                          "registry rule it breaks); the others were imported")


def _recipe_lines(rec: Listed, sweeps: int, model_id: str | None = None) -> tuple[str, str]:
    f = rec.fields
    ctx = f"{f.context_tokens:,}" if f.context_tokens is not None else "?"
    version = f" (version {rec.version} of {rec.versions})" if rec.versions > 1 else ""
    what = "lab recipe " if rec.kind == "lab_recipe" else ""
    return (f"{what}{rec.id}{version}", f"  model {model_id or f.model_id or '?'} ({f.model_instance_id or '?'}) · "
            f"hardware {f.hardware_id or '?'} · engine {f.engine or '?'} · context {ctx} · concurrency "
            f"{f.concurrency if f.concurrency is not None else '?'} · {sweeps} speed sweep{'s' if sweeps != 1 else ''}")


@registry_group.command("list")
@db_option
@click.option("--model", default=None, help="A model id or model-instance id, else a documented alias, exactly "
              "(Laguna-S-2.1 is laguna-s-2-1); never a part of a name.")
@click.option("--hardware", default=None, help="A hardware id, or `detected` for this host's.")
@click.option("--engine", default=None, help="Engine name (llama.cpp, vllm, ...).")
@click.option("--context", type=click.IntRange(min=1, max=MAX_TOKENS), default=None,
              help="Only recipes that serve at least this many context tokens.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
def registry_list(db: Path | None, model: str | None, hardware: str | None, engine: str | None,
                  context: int | None, as_json: bool) -> None:
    """The newest version of every recipe held (filtered), with its speed sweeps; then sweeps without a recipe."""
    hw = _hardware(hardware)
    with RegistryDB.open(db or default_db_path()) as opened:
        shown = opened.listing(model=model, hardware_id=hw, engine=engine, min_context=context, detail=as_json)
    recipes, sweeps, models, orphans, counts = shown.recipes, shown.sweeps, shown.models, shown.orphans, shown.counts
    if as_json:
        print_json({"db": str(opened.path), "hardware": hw, "counts": counts,
                    "recipes": [{**r.as_dict(), "model_id": models[r.id],
                                 "speed_sweeps": [s.as_dict() for s in sweeps[r.id]]} for r in recipes],
                    "sweeps_without_recipe": [s.as_dict() for s in orphans]})
        return
    if hardware == "detected":
        progress(f"this host is detected as {hw}")
    lines: list[str] = []
    for r in recipes:
        lines += _recipe_lines(r, len(sweeps[r.id]), models[r.id])
        lines += [f"  sweep {s.id}: {s.rows} rows, contexts up to {s.fields.context_tokens or '?'}"
                  for s in sweeps[r.id]]
    for s in orphans:
        lines += [s.id, f"  speed sweep of recipe {s.fields.recipe_id}, which is not in the registry"]
    lab = counts.get("lab_recipes", 0)
    lines.append(f"{len(recipes)} recipe{'s' if len(recipes) != 1 else ''} shown; the database holds "
                 f"{counts['recipes'] + lab} recipes{f' ({lab} of them lab recipes)' if lab else ''}, "
                 f"{counts['speed_sweeps']} speed sweeps ({opened.path})")
    echo_lines(lines)


def _figure_words(fig: Figure | None) -> str:
    if fig is None:
        return "no measured decode"
    ctx = f"{fig.context_tokens:,}" if fig.context_tokens is not None else "an unstated"
    conc = (f"concurrency {fig.concurrency}" if fig.concurrency is not None else
            "concurrency unknown (null in the record)")
    if fig.reported:
        return f"reported decode {fig.decode_tok_s:,.2f} tok/s, {conc} (ranked below measured; {fig.source})"
    return (f"decode {fig.decode_tok_s:,.2f} tok/s at {ctx} context, {conc} "
            f"({'as asked' if fig.exact else 'nearest measured'}; {fig.source})")


def _render_choice(c: Choice) -> None:
    where = f" recorded on {c.hardware_filter}" if c.hardware_filter else ""
    echo(f"recipes for {c.model} (matched by {c.matched_by}){where}, ranked by measured decode at "
         f"{c.context:,} context tokens (concurrency 1; nearest measured context where not exact); this host: "
         f"{c.host_hardware_id} ({c.host_label})")
    verdict = {"yes": "RUNNABLE here", "no": "NOT runnable here", "unknown": "runnable here: UNKNOWN"}
    for i, cand in enumerate(c.candidates, 1):
        what = "lab recipe " if cand.kind == "lab_recipe" else ""
        echo(f"{i}. {what}{cand.recipe_id}: {_figure_words(cand.figure)} · {verdict[cand.runnable]}")
        for check in cand.checks:
            echo(f"   {MARK[check.ok]} {check.name}: {check.detail}")
    if c.elsewhere:
        echo(f"left out by --hardware: recipes for this model on {', '.join(c.elsewhere)}")
    best = c.best_runnable
    if best:
        echo(f"best runnable here: {best.recipe_id}")
        echo(f"to measure it here: servepack reproduce {best.recipe_id} [PACK] --model-file PATH --db "
             "DB (--dry-run first to see the launch)")
    elif c.candidates:
        echo(f"nothing is runnable here: every recipe above fails or leaves unknown a check "
             f"({'; '.join(sorted({ch.name for cand in c.candidates for ch in cand.checks if not ch.ok}))})")
        echo(f"to see one's launch and protocol anyway: servepack reproduce {c.candidates[0].recipe_id} "
             "--dry-run --db DB")
    else:
        echo("no recipe for this model on that hardware")


@registry_group.command("choose")
@click.argument("model")
@db_option
@click.option("--hardware", default=None, help="Only recipes recorded on this hardware id, or `detected` (this host).")
@click.option("--context", type=click.IntRange(min=1, max=MAX_TOKENS), default=DEFAULT_CONTEXT, show_default=True,
              help="Context tokens to rank decode at (the nearest measured context where none is exact).")
@click.option("--model-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A local GGUF to check against the recipes' model pin and to size memory from.")
@click.option("--json", "as_json", is_flag=True, help="Print the ranking and every check as JSON.")
def registry_choose(model: str, db: Path | None, hardware: str | None, context: int, model_file: Path | None,
                    as_json: bool) -> None:
    """Recipes for MODEL ranked by measured decode; each marked runnable here or not, and why.

    MODEL is a model id or model-instance id, exactly (punctuation folded: Laguna-S-2.1 = laguna-s-2-1), else a
    documented alias exactly (a model's name or repository, an instance's repository or served name); never a part
    of a name. Lab recipes are recipes too.
    """
    from servepack.registry.choose import choose, this_host

    host = this_host()
    hw = host.hardware_id if hardware == "detected" else hardware
    with RegistryDB.open(db or default_db_path()) as opened:
        result = choose(opened, model, host, context=context, hardware=hw, model_file=model_file)
    if as_json:
        print_json(result.as_dict())
    else:
        _render_choice(result)


COMMANDS: list[click.Command] = []  # these attach to `servepack registry` (cli/records.py)
