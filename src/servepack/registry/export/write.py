"""Checking and writing an export: servepack's export schema, the `--out` folder's checks, and the records written
into it in the registry's layout after the whole folder passes the registry's rules."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jsonschema

from servepack.errors import UsageError
from servepack.records.claims import load_run, pack_of
from servepack.registry.export.export import build_export
from servepack.registry.format.check import (
    COLLECTIONS,
    Problem,
    canonical_bytes,
    check_files,
    collection_schema,
    read_folder,
    upstream_problems,
)
from servepack.safepath import kind_at
from servepack.store import check_out, refuse_sealed, write_bytes_atomic

ExportKind = Literal["recipe", "speed_sweep"]


def schema(kind: ExportKind) -> dict[str, Any]:
    """servepack's JSON Schema for what an export writes (draft 2020-12): stricter than the registry's own."""
    return collection_schema(kind)


def validate(kind: ExportKind, record: dict[str, Any], where: str) -> None:
    """Raise UsageError naming the first field of an export that breaks servepack's export schema."""
    validator = jsonschema.Draft202012Validator(schema(kind))
    errors = sorted(validator.iter_errors(record), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        path = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise UsageError(f"{where}: {kind} record field {path}: {first.message}{more}")


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote (relative path → absolute path), the shared records it kept, and its declared gaps."""

    out_dir: Path
    written: dict[str, Path]
    unchanged: tuple[str, ...]
    gaps: tuple[Problem, ...]
    recipe: Path
    speed_sweep: Path
    lab_run: Path | None = None  # a CPU box's run in the registry's lab format: what to submit
    card_problem: str | None = None  # why that run cannot be submitted as is (its card), None when it can
    hardware_id: str = ""  # the card the numbers carry
    hardware_how: str = ""  # how it was chosen, in words
    hardware_published: bool = False  # one of the registry's cards (its catalog); else the export carries its record

    @property
    def submittable(self) -> bool:
        """The export passed the registry's rules, cross-record ones included (checked before it was written), and
        states every field they require: no declared gap, and for a CPU box a card the lab publishes."""
        return not self.gaps and not self.card_problem


def check_export_dir(out_dir: Path, flag: str = "--out") -> None:
    """Before anything is read or measured: `out_dir` can become an export folder (no file in the way, not inside a
    finished run, `store.check_out`) and this user may write where it goes (its nearest existing folder). A folder
    that cannot be written was a failed write of the first record, exit 1, after the work."""
    for p in (out_dir, *out_dir.parents):  # what is in the way, named as what it is, with the option that named it
        if (kind := kind_at(p)) is not None or p.is_symlink():
            if kind != "a folder":
                what = "a file" if kind == "a regular file" else kind or "a broken link"
                raise UsageError(f"cannot create the export directory {out_dir}: {p} is {what}, not a directory; "
                                 f"choose another {flag}")
            break
    check_out(out_dir, "the export directory")
    existing = next((p for p in (out_dir, *out_dir.parents) if p.is_dir()), None)
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {out_dir}: {existing} is not writable here (permission denied or a read-only "
                         f"filesystem); choose another {flag} or fix its permissions")


def export_run(run_dir: Path, out_dir: Path) -> ExportResult:
    """Write one run's records into `out_dir` in the registry's layout, after checking the whole folder.

    The folder's existing records count too (references may resolve to them); a hardware or model record an
    earlier export left there is kept as it is. Every broken rule refuses the export with the record and field named,
    except the declared gaps: fields the registry requires that the run cannot state truthfully (a CPU-only host's
    accelerator backend); those are written, reported, and listed in the recipe's metadata as not submittable.
    `out_dir` may not be (or lie inside) a finished results directory.
    """
    refuse_sealed(out_dir, "registry export --out")
    check_export_dir(out_dir)
    view = load_run(run_dir)
    ex = build_export(view, pack_of(view.receipt))
    existing = read_folder(out_dir) if out_dir.is_dir() and any(
        (out_dir / c).is_dir() for c in ("hardware", "model", "model-instance", "recipe", "speed-sweep")) else {}
    new = {rel: canonical_bytes(rec) for rel, rec in ex.records.items()}
    for rel in (ex.recipe_file, ex.sweep_file, ex.lab_run_file):
        if rel is not None and (rel in existing or (out_dir / rel).exists()):
            raise UsageError(f"{out_dir / rel} exists; results are append-only, choose a new --out directory")
    kept = {rel: existing[rel] for rel in new if rel in existing}  # an earlier export's hardware / model record
    collections = {rel: data for rel, data in new.items() if rel not in kept and rel.split("/")[0] in COLLECTIONS}
    problems = check_files({**existing, **collections}, has_prices=(out_dir / "price").is_dir())
    if ex.lab_run_file:
        problems += [Problem(ex.lab_run_file, p.split(":")[0], p) for p in
                     upstream_problems("lab_run", ex.records[ex.lab_run_file])]
    declared = set(ex.gaps)
    gaps = tuple(p for p in problems if (p.file, p.field) in declared)
    refused = [p for p in problems if (p.file, p.field) not in declared]
    if refused:
        more = f" (and {len(refused) - 1} more; `servepack registry check` lists them)" if len(refused) > 1 else ""
        raise UsageError(f"export of {run_dir} refused, it breaks the registry's rules: {out_dir / refused[0].file}: "
                         f"{refused[0].field}: {refused[0].message}{more}")
    written = {rel: write_bytes_atomic(out_dir / rel, data) for rel, data in new.items() if rel not in existing}
    return ExportResult(out_dir=out_dir, written=written, unchanged=tuple(sorted(kept)),
                        gaps=gaps, recipe=out_dir / ex.recipe_file, speed_sweep=out_dir / ex.sweep_file,
                        lab_run=out_dir / ex.lab_run_file if ex.lab_run_file else None,
                        card_problem=ex.card_problem, hardware_id=ex.hardware.id if ex.hardware else "",
                        hardware_how=ex.hardware.how if ex.hardware else "",
                        hardware_published=bool(ex.hardware and ex.hardware.in_catalog))


def export_records(run_dir: Path, out_dir: Path) -> tuple[Path, Path]:
    """Write a run's records (see `export_run`); the recipe's and the speed sweep's paths."""
    res = export_run(run_dir, out_dir)
    return res.recipe, res.speed_sweep
