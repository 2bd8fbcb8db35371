"""`servepack registry import`: files and folders of records into the registry database, one by one.

What is taken: a file named on the command line is read whatever its name (the seed envelope is a .txt); in a
folder, walked recursively (symlinked folders and dot-folders are not followed), only `*.json` files. Every record
kind the local-ai-registry defines is read (`registry.format.record_kind`: recipes, speed sweeps, benchmarks,
hardware, models, model instances, and its lab format — lab recipes, lab runs, engine profiles), stored or as an
API envelope, by its folder and its fields. A record is checked only by the registry's own rules (its schemas,
vendored unchanged, and its validator's per-record rules), so whatever the registry accepts is imported; where
servepack reads a field other than as written (a time without `Z`), the record says so (`normalised`).

In a folder, documents that are no record (the registry's index, schemas, assets, prices, any other JSON) are
skipped and counted; named on the command line they are refused. Each refusal is one line naming the file, the
field and the registry rule it breaks; the rest of the batch is imported. `registry import` exits 1 when some
file was refused, 0 otherwise. A path named on the command line that is not there (nothing at it, a link to
nothing) is a wrong argument (`check_named`): refused before anything is imported or the database opened, one
line, exit 2, as other wrong arguments are.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from servepack.errors import ServepackError, UsageError
from servepack.registry.db import DatabaseUnwritable, RegistryDB
from servepack.registry.format import RECORD_KINDS, RecordKind, parse_record, read_record_bytes, record_kind
from servepack.registry.format.check import load_json
from servepack.registry.format.record import RecordRefused
from servepack.safepath import names_something

KIND_WORDS = {"recipe": "recipes", "speed_sweep": "speed sweeps", "benchmark": "benchmarks",
              "benchmark_run": "benchmark runs", "hardware": "hardware",
              "model": "models", "model_instance": "model instances", "lab_recipe": "lab recipes",
              "lab_run": "lab runs", "engine_profile": "engine profiles", "card": "cards"}


class SomeRefused(ServepackError):
    """Some files broke the registry's rules (each named already); the others were imported."""

    exit_code = 1

Outcome = Literal["imported", "new-version", "same-record", "already-present", "refused", "skipped"]


@dataclass(frozen=True)
class ImportResult:
    path: Path
    outcome: Outcome
    record_id: str | None = None
    kind: RecordKind | None = None
    version: int | None = None
    reason: str | None = None
    redacted: tuple[str, ...] = ()  # where the record holds a secret; kept as in the file, shown as <redacted>
    problems: tuple[str, ...] = ()  # a refused record: every rule it breaks (the line names the first)

    def _secrets(self) -> str:
        return (f"; it holds secret values, kept as the file has them and shown as <redacted> by every command: "
                f"{', '.join(self.redacted)}" if self.redacted else "")

    def line(self) -> str:
        what = f"{self.kind.replace('_', ' ') if self.kind else 'record'} {self.record_id}"
        if self.outcome == "imported":
            return (f"imported {what} from {self.path}" + (f" (normalised: {self.reason})" if self.reason else "")
                    + self._secrets())
        if self.outcome == "new-version":
            return (f"imported {what} as version {self.version} from {self.path}: its content differs from the "
                    "version held; the newest import is the one read" + self._secrets())
        if self.outcome == "same-record":
            return (f"already present: {what} version {self.version} (same record in other bytes: envelope or "
                    f"formatting); {self.path} kept as another source")
        if self.outcome == "already-present":
            return f"already present: {self.path} ({what} version {self.version}, {self.reason})"
        if self.outcome == "skipped":
            return f"skipped {self.path}: {self.reason}"
        return f"refused {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "outcome": self.outcome, "id": self.record_id, "kind": self.kind,
                "version": self.version, "reason": self.reason, "redacted": list(self.redacted),
                "problems": list(self.problems)}


@dataclass(frozen=True)
class ImportSummary:
    db: Path
    results: tuple[ImportResult, ...]

    def count(self, *outcomes: Outcome) -> int:
        return sum(r.outcome in outcomes for r in self.results)

    @property
    def refused(self) -> int:
        return self.count("refused")

    def by_kind(self) -> dict[str, int]:
        """Records read (imported, new versions, already present) per kind, in the registry's order."""
        got = [r.kind for r in self.results if r.outcome not in ("refused", "skipped") and r.kind]
        return {k: got.count(k) for k in RECORD_KINDS if k in got}

    def line(self) -> str:
        kinds = ", ".join(f"{n} {KIND_WORDS[k]}" for k, n in self.by_kind().items()) or "no records"
        return (f"{self.count('imported')} imported, {self.count('new-version')} new versions, "
                f"{self.count('already-present', 'same-record')} already present, {self.count('skipped')} skipped, "
                f"{self.refused} refused; by kind: {kinds}; database {self.db}")

    def as_dict(self) -> dict[str, Any]:
        return {"db": str(self.db), "imported": self.count("imported"), "new_versions": self.count("new-version"),
                "already_present": self.count("already-present", "same-record"), "skipped": self.count("skipped"),
                "refused": self.refused, "by_kind": self.by_kind(), "files": [r.as_dict() for r in self.results]}


def _absent(path: Path) -> str | None:
    """Why nothing can be read at a path named on the command line (nothing there, a link to nothing), or None: what
    is there (a file, a folder, something unreadable or of another kind) is judged when it is read."""
    if not names_something(path):
        return "no such file or folder"
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return "a symbolic link to nothing" if exc.errno != errno.ELOOP else "a symbolic link that loops"
    return None


def check_named(paths: Sequence[Path]) -> None:
    """Before anything is imported (or the database opened): every path named on the command line is there. The
    first that is not is refused, with how many more, as a wrong argument (UsageError, exit 2)."""
    absent = [(p, why) for p in paths if (why := _absent(p)) is not None]
    if absent:
        (first, why), more = absent[0], len(absent) - 1
        also = f" (and {more} more of the paths named)" if more else ""
        raise UsageError(f"{first}: {why}{also}; name record files or folders that exist (nothing was imported)")


def candidates(paths: Iterable[Path]) -> Iterator[tuple[Path, bool, str | None]]:
    """(file, named on the command line, why it is skipped) in order; folders walked, sorted, links not followed."""
    for top in paths:
        if not top.is_dir():
            yield top, True, None
            continue
        for root, dirs, files in os.walk(top, followlinks=False):
            here = Path(root)
            for d in sorted(dirs):
                if (here / d).is_symlink():
                    yield here / d, False, "a symlinked folder, not followed"
            dirs[:] = sorted(d for d in dirs if not (here / d).is_symlink() and not d.startswith("."))
            for name in sorted(files):
                if name.endswith(".json"):
                    yield here / name, False, None


def _kind_of(doc: Any, path: Path) -> RecordKind | None:
    """The kind a document is meant as (see the module docstring); None when it is no record."""
    if not isinstance(doc, dict):
        return None
    record = doc["data"] if "data" in doc and "schema_version" not in doc and isinstance(doc["data"], dict) else doc
    return record_kind(record, path.parent.name)


def import_one(db: RegistryDB, path: Path, named: bool) -> ImportResult:
    """Read, classify, validate and store one file; a bad one is an ImportResult "refused", never an exception."""
    try:
        raw = read_record_bytes(path)
        try:
            doc = load_json(raw)
        except ValueError:
            doc = None  # parse_record below states the JSON error
        kind = _kind_of(doc, path)
        if kind is None and doc is not None:
            if not named:
                return ImportResult(path, "skipped", reason="not a record of a kind the registry defines (an index, "
                                    "schema, asset, price or other JSON)")
            raise UsageError(f"{path}: not a record of a kind the registry defines: recipe, speed sweep, benchmark, "
                             "hardware, model, model instance, lab recipe, lab run, engine profile, card")
        loaded = parse_record(raw, path, kind)
        stored = db.store(raw, loaded, str(path.absolute()))
    except DatabaseUnwritable:
        raise  # not this file's fault: the batch stops here, what was imported stays
    except RecordRefused as exc:
        return ImportResult(path, "refused", reason=str(exc), problems=exc.problems)
    except ServepackError as exc:
        return ImportResult(path, "refused", reason=str(exc))
    reason = f"first read from {stored.earlier_source}" if stored.earlier_source else None
    if loaded.normalised and stored.outcome in ("imported", "new-version"):
        reason = "; ".join(loaded.normalised)
    return ImportResult(path, stored.outcome, stored.record_id, stored.kind, stored.version, reason, stored.redacted)


def import_paths(db: RegistryDB, paths: Sequence[Path], on_result: Any = None) -> ImportSummary:
    """Import every file under `paths`, each in its own transaction; `on_result(result)` is called as each ends.
    A path that is not there refuses the whole call first (`check_named`)."""
    check_named(paths)
    results = []
    with db.bulk():
        for path, named, skip in candidates(paths):
            result = ImportResult(path, "skipped", reason=skip) if skip else import_one(db, path, named)
            results.append(result)
            if on_result is not None:
                on_result(result)
    return ImportSummary(db.path, tuple(results))
