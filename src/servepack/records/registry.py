"""local-ai-registry/v1 records, both ways: export a run as recipe + speed sweep, read a stored record."""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import jsonschema

from servepack.errors import UsageError

REGISTRY_SCHEMA_VERSION = "local-ai-registry/v1"
# Fields the registry's API adds to a stored record inside its envelope; not part of the stored form.
API_ONLY_FIELDS = ("huggingface", "registry", "relationships")
RecordKind = Literal["recipe", "speed_sweep"]


def schema(kind: RecordKind) -> dict[str, Any]:
    """servepack's JSON Schema for one record kind (draft 2020-12)."""
    text = resources.files("servepack.records").joinpath(f"schemas/{kind}.schema.json").read_text()
    doc: dict[str, Any] = json.loads(text)
    return doc


def validate(kind: RecordKind, record: dict[str, Any], where: str) -> None:
    """Raise UsageError naming the first field that breaks the schema."""
    validator = jsonschema.Draft202012Validator(schema(kind))
    errors = sorted(validator.iter_errors(record), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        path = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise UsageError(f"{where}: {kind} record field {path}: {first.message}{more}")


_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
_SAMPLES = {
    "decode_tok_s": re.compile(r"decode samples were (?P<list>[^;]+?)(?: tok/s)?; median (?P<median>[\d,.]+)", re.I),
    "ttft_ms": re.compile(r"TTFT samples were (?P<list>[^;]+?)(?: ms)?; median (?P<median>[\d,.]+)", re.I),
    "prefill_tok_s": re.compile(
        r"prefill samples were (?P<list>[^;]+?)(?: prompt tok/s)?; median (?P<median>[\d,.]+)", re.I
    ),
}


def numbers(text: str) -> list[float]:
    """Every number in `text`, reading 10,897.33 as one number."""
    return [float(m.replace(",", "")) for m in _NUMBER.findall(text)]


@dataclass(frozen=True)
class SampleSet:
    """One metric's samples as a note states them, with its stated and its recomputed median."""

    metric: str
    samples: tuple[float, ...]
    stated_median: float
    stated_decimals: int = 2

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def consistent(self) -> bool:
        """The stated median matches the samples to the note's own rounding."""
        return bool(abs(self.median - self.stated_median) <= 0.5 * 10.0**-self.stated_decimals + 1e-9)


def parse_notes(notes: str) -> list[SampleSet]:
    """Samples stated in registry-style notes ("Decode samples were a, b, and c tok/s; median m.")."""
    found = []
    for metric, pattern in _SAMPLES.items():
        for m in pattern.finditer(notes):
            stated = m.group("median").rstrip(".")
            decimals = len(stated.split(".")[1]) if "." in stated else 0
            found.append(SampleSet(metric, tuple(numbers(m.group("list"))), numbers(stated)[0], decimals))
    return found


@dataclass(frozen=True)
class LoadedRecord:
    """A validated registry record, with what the API envelope added kept apart."""

    path: Path
    kind: RecordKind
    record: dict[str, Any]
    envelope_meta: dict[str, Any] | None = None
    api_fields: dict[str, Any] = field(default_factory=dict)

    @property
    def notes(self) -> dict[str, str]:
        """Notes under metadata.<source>.notes, by source (localmaxxing, servepack, ...)."""
        meta = self.record.get("metadata") or {}
        return {k: v["notes"] for k, v in meta.items() if isinstance(v, dict) and isinstance(v.get("notes"), str)}

    @property
    def samples(self) -> list[SampleSet]:
        return [s for text in self.notes.values() for s in parse_notes(text)]

    def observed_command(self) -> dict[str, Any] | None:
        for value in (self.record.get("metadata") or {}).values():
            if isinstance(value, dict) and isinstance(value.get("tokenized"), dict):
                return {"command": value.get("observed_command"), **value["tokenized"]}
        return None


def record_kind(record: dict[str, Any]) -> RecordKind:
    return "speed_sweep" if "rows" in record and "recipe_id" in record else "recipe"


def load_record(path: Path) -> LoadedRecord:
    """Read a stored record or an API envelope {"data": …, "meta": …}; validate it against our schema."""
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"{path}: cannot read registry record ({exc.strerror})") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not JSON ({exc})") from None
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
    if record.get("schema_version") != REGISTRY_SCHEMA_VERSION:
        raise UsageError(f"{path}: schema_version {record.get('schema_version')!r} is not {REGISTRY_SCHEMA_VERSION!r}")
    kind = record_kind(record)
    validate(kind, record, str(path))
    return LoadedRecord(path=path, kind=kind, record=record, envelope_meta=meta, api_fields=api)


def summary(loaded: LoadedRecord) -> dict[str, Any]:
    """What a record says, flattened for `registry show`."""
    r = loaded.record
    out: dict[str, Any] = {"path": str(loaded.path), "kind": loaded.kind, "id": r["id"],
                           "envelope": loaded.envelope_meta is not None}
    if loaded.kind == "speed_sweep":
        out.update(recipe_id=r["recipe_id"], measured_at=r["measured_at"], metrics=r.get("metrics", {}),
                   rows=r["rows"])
        return out
    unknown = {k: f.get("reason") for k, f in r["facts"].items() if f["state"] != "known"}
    out.update(
        status=r["status"], recipe_source=r["recipe_source"], model_instance_id=r["model_instance_id"],
        hardware_id=r["hardware_id"], hardware_count=r["hardware_count"], engine=r["engine"],
        launch_kind=r["launch"]["kind"], serving=r["serving"], capabilities=r["capabilities"],
        speed_sweep_ids=r["speed_sweep_ids"], observed_command=loaded.observed_command(),
        facts_not_known=unknown, captured_at=r["provenance"]["captured_at"],
        samples=[{"metric": s.metric, "n": len(s.samples), "samples": list(s.samples),
                  "median_stated": s.stated_median, "median_recomputed": round(s.median, 3),
                  "consistent": s.consistent} for s in loaded.samples],
    )
    return out
