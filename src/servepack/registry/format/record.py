"""Reading a registry record: the kinds the local-ai-registry defines (by folder and fields), a stored record,
an API envelope or a lab-format file parsed into a `LoadedRecord` and checked by the registry's own rules, and
how servepack reads its times."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from servepack.errors import UsageError
from servepack.redact import document_secrets, scrub_message
from servepack.registry.format.check import (
    MAX_RECORD_BYTES,
    REGISTRY_SCHEMA_VERSION,
    TIME_FIELDS,
    load_json,
    upstream_problems,
)
from servepack.registry.format.notes import SampleSet, parse_notes
from servepack.safepath import read_bounded

# Fields the registry's API adds to a stored record inside its envelope; not part of the stored form.
API_ONLY_FIELDS = ("huggingface", "registry", "relationships")
# Every record kind the registry defines: its collections (schema_version local-ai-registry/v1) and its lab format
# (lab recipes under recipes/<card>/, lab runs under lab/runs/, the engine profiles under engines/ they render from).
# A benchmark run (registry/benchmark-run/: one model instance's score on one benchmark, direct or inherited from the
# model card) is a kind of its own beside the benchmark catalog entry and the results table.
RecordKind = Literal["recipe", "speed_sweep", "benchmark", "benchmark_run", "hardware", "model", "model_instance",
                     "lab_recipe", "lab_run", "engine_profile", "card"]
RECORD_KINDS: tuple[RecordKind, ...] = ("recipe", "speed_sweep", "benchmark", "benchmark_run", "hardware", "model",
                                        "model_instance", "lab_recipe", "lab_run", "engine_profile", "card")
# the lab's cards (cards/<vendor>/<id>.json: id, name, vendor, backend, vram_gb, bandwidth_gb_s, names): what
# `lab.py card()` reads a recipe's `card` as
LAB_KINDS = frozenset({"lab_recipe", "lab_run", "engine_profile", "card"})
LAB_CARD_KEYS = frozenset({"id", "name", "vendor", "backend"})
RECIPE_KINDS = frozenset({"recipe", "lab_recipe"})  # what `registry choose` ranks


def parse_time(value: str) -> datetime | None:
    """An RFC 3339 / ISO 8601 time (Z, an offset, or none = UTC), or None when it is not one."""
    try:
        t = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


# The note a sweep checked without metrics gets (servepack's own exports before the registry required them); an
# import keeps it with the record's other notes, a read (`check=False`) does not say it.
METRICS_MISSING = "metrics missing (written before the registry required them); read without"


def normalise_times(kind: str, record: dict[str, Any]) -> tuple[str, ...]:
    """What servepack reads a record's times as, where that differs from the text (the record itself is kept)."""
    notes = []
    for dotted in TIME_FIELDS.get(kind, ()):
        node: Any = record
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, str):
            continue
        t = parse_time(node)
        if t is None:
            notes.append(f"{dotted} {node[:60]!r} is not a time servepack can read; kept as is, read as unknown")
            continue
        utc = t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{t.microsecond:06d}".rstrip("0") if t.microsecond else "") + "Z"
        if not node.endswith("Z"):  # already UTC as the registry writes it: nothing to say
            notes.append(f"{dotted} {node!r} read as {utc}")
    return tuple(notes)


@dataclass(frozen=True)
class LoadedRecord:
    """A validated registry record, with what the API envelope added kept apart."""

    path: Path
    kind: RecordKind
    record: dict[str, Any]
    envelope_meta: dict[str, Any] | None = None
    api_fields: dict[str, Any] = field(default_factory=dict)
    normalised: tuple[str, ...] = ()  # how servepack reads fields whose text it does not take as is (times)
    lab_id: str | None = None  # a lab-format record's id (the lab names them by file, not by an id field)
    related: dict[str, Any] = field(default_factory=dict)  # records the registry holds beside it (engine profile)

    @property
    def id(self) -> str:
        return self.lab_id or str(self.record.get("id"))

    @property
    def notes(self) -> dict[str, str]:
        """Notes under metadata.<source>.notes, by source (localmaxxing, servepack, ...)."""
        meta = self.record.get("metadata") or {}
        return {k: v["notes"] for k, v in meta.items() if isinstance(v, dict) and isinstance(v.get("notes"), str)}

    @property
    def samples(self) -> list[SampleSet]:
        out = []
        for source, text in self.notes.items():
            try:
                out.extend(parse_notes(text))
            except UsageError as exc:
                raise UsageError(f"{self.path}: metadata.{source}.notes: {exc}; fix the record's notes") from None
        return out

    def observed_command(self) -> dict[str, Any] | None:
        for value in (self.record.get("metadata") or {}).values():
            if isinstance(value, dict) and isinstance(value.get("tokenized"), dict):
                return {"command": value.get("observed_command"), **value["tokenized"]}
        return None


LAB_RECIPE_KEYS = frozenset({"model", "weights", "engine", "card"})


def record_kind(record: dict[str, Any], folder: str = "") -> RecordKind | None:
    """The kind a document is meant as, by its folder (the registry's layout) and its fields; None if no record."""
    by_folder: dict[str, RecordKind] = {
        "speed-sweep": "speed_sweep", "speed-sweeps": "speed_sweep", "speed_sweep": "speed_sweep",
        "speed_sweeps": "speed_sweep", "benchmark": "benchmark", "benchmarks": "benchmark", "hardware": "hardware",
        "benchmark-run": "benchmark_run", "benchmark-runs": "benchmark_run", "benchmark_run": "benchmark_run",
        "benchmark_runs": "benchmark_run",
        "model": "model", "models": "model", "model-instance": "model_instance", "model-instances": "model_instance",
        "runs": "lab_run", "engines": "engine_profile"}
    if "schema_version" not in record:
        if LAB_RECIPE_KEYS <= set(record) and "proof" in record:
            return "lab_recipe"
        if isinstance(record.get("recipe"), dict) and "passed" in record:
            return "lab_run"
        if {"id", "args"} <= set(record) and "engine" in record and ("image" in record
                                                                      or record.get("kind") == "native"):
            return "engine_profile"
        if folder == "engines":  # the lab's engines/ holds only profiles; one lacking a field is refused, not skipped
            return "engine_profile"
        if LAB_CARD_KEYS <= set(record) and ("vram_gb" in record or "names" in record):
            return "card"
        return by_folder.get(folder) if folder in by_folder and folder not in ("runs", "engines") else None
    if folder in by_folder and folder not in ("runs", "engines"):
        return by_folder[folder]
    if folder in ("recipe", "recipes"):
        return "recipe"
    if "rows" in record and "recipe_id" in record:
        return "speed_sweep"
    if {"benchmark_id", "score", "score_origin"} <= set(record):  # a benchmark run (registry/benchmark-run/)
        return "benchmark_run"
    if "rows" in record and ("category" in record or "name" in record):
        return "benchmark"
    if {"runner", "metric", "coverage"} <= set(record):  # a benchmark catalog entry (registry/benchmark/)
        return "benchmark"
    if any(k in record for k in ("recipe_source", "launch", "speed_sweep_ids")):
        return "recipe"
    if "model_id" in record and ("weights" in record or "served_name" in record):
        return "model_instance"
    if "accelerator_backend" in record or ("vendor" in record and "memory" in record):
        return "hardware"
    if "params" in record or ("huggingface" in record and "name" in record):
        return "model"
    return None


def lab_record_id(kind: str, record: dict[str, Any], path: Path) -> str | None:
    """How the lab names a record: recipes by <card>/<file stem>, runs by file stem, engine profiles by their id."""
    if kind == "lab_recipe":
        return f"{record.get('card')}/{path.stem}"
    if kind == "lab_run":
        return path.stem
    if kind in ("engine_profile", "card"):
        return str(record.get("id"))
    return None


def read_record_bytes(path: Path) -> bytes:
    """A record file's bytes: a regular file of at most MAX_RECORD_BYTES (safepath.read_bounded)."""
    return read_bounded(path, MAX_RECORD_BYTES, "not a registry record, check the path")


def load_record(path: Path) -> LoadedRecord:
    """Read a stored record or an API envelope {"data": …, "meta": …}; check it by the registry's own rules."""
    return parse_record(read_record_bytes(path), path)


class RecordRefused(UsageError):
    """A record that breaks the registry's rules: the message names the first broken rule, `problems` every one
    (each naming its field and rule, none quoting a secret of the record)."""

    def __init__(self, message: str, problems: tuple[str, ...]) -> None:
        super().__init__(message)
        self.problems = problems


def parse_record(raw: bytes, path: Path, kind: RecordKind | None = None, *, check: bool = True) -> LoadedRecord:
    """The record in `raw` (stored form, API envelope, or the lab's format), read as `kind` (default: by its
    folder and fields) and checked by the registry's own rules (its vendored schemas, its validator's per-record
    rules, the lab's check): a record the registry accepts is read, whatever servepack would write itself.

    `check=False` skips the rules (a record checked when it was imported, read back verbatim). A refusal never
    quotes one of the record's secrets (`redact.scrub_message`).
    """
    try:
        doc = load_json(raw)
    except ValueError as exc:
        raise UsageError(f"{path}: not a JSON registry record ({str(exc)[:160]})") from None
    try:
        return _parse_record(doc, raw, path, kind, check)
    except RecordRefused as exc:
        secrets = document_secrets(doc)
        raise RecordRefused(scrub_message(str(exc), secrets),
                            tuple(scrub_message(p, secrets) for p in exc.problems)) from None
    except UsageError as exc:
        raise UsageError(scrub_message(str(exc), document_secrets(doc))) from None


def _parse_record(doc: Any, raw: bytes, path: Path, kind: RecordKind | None, check: bool) -> LoadedRecord:
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: a registry record is a JSON object")
    meta = None
    api: dict[str, Any] = {}
    if "data" in doc and "schema_version" not in doc:
        if not isinstance(doc["data"], dict):
            raise UsageError(f"{path}: envelope field data is not an object")
        meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
        record = dict(doc["data"])
        api = {k: record.pop(k) for k in API_ONLY_FIELDS if k in record}
    else:
        record = doc
    folder = path.parent.name
    kind = kind or record_kind(record, folder)
    if "schema_version" in record and record["schema_version"] != REGISTRY_SCHEMA_VERSION:
        raise UsageError(f"{path}: schema_version {record.get('schema_version')!r} is not {REGISTRY_SCHEMA_VERSION!r} "
                         "(upstream validate_registry.py: schema_version must be local-ai-registry/v1)")
    if kind is None:
        raise UsageError(f"{path}: not a record of a kind the registry defines (recipe, speed sweep, benchmark, "
                         "hardware, model, model instance, lab recipe, lab run, engine profile, card)")
    if kind not in LAB_KINDS and record.get("schema_version") != REGISTRY_SCHEMA_VERSION:
        raise UsageError(f"{path}: schema_version {record.get('schema_version')!r} is not {REGISTRY_SCHEMA_VERSION!r} "
                         "(upstream validate_registry.py: schema_version must be local-ai-registry/v1)")
    notes = normalise_times(kind, record)
    if check:
        problems = upstream_problems(kind, record, raw, folder if kind == "lab_recipe" else "")
        if kind == "speed_sweep" and "metrics" not in record:  # servepack's own exports before metrics were required
            problems = [p for p in problems if not p.startswith("(top level): 'metrics' is a required property")]
            notes += (METRICS_MISSING,)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise RecordRefused(f"{path}: {kind.replace('_', ' ')} breaks the registry's rule: {problems[0]}{more}",
                                tuple(problems))
    return LoadedRecord(path=path, kind=kind, record=record, envelope_meta=meta, api_fields=api,
                        normalised=notes, lab_id=lab_record_id(kind, record, path))
