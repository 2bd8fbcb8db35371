"""Does this run match that record? The one run-vs-record judgement, used by `reproduce`, `compare RUN RECORD` and
the report's registry section, so the same run and record give the same verdicts everywhere.

The facts first: hardware, engine build, model bytes, and the launch (a rewrite that changes what is measured, a run
served with other flags than the record's launch, a record stating no launch servepack can read). Then a verdict
per metric and record cell, against the run's cell of the same prompt size, concurrency and output length:
REPRODUCED, FASTER, SLOWER or NOT_COMPARABLE, each with its reason in figures.

A metric is REPRODUCED when the run's 95% interval of the median lies inside the record's band: the record's
own spread (its samples' range) joined with ±tolerance around its median. FASTER or SLOWER when the whole
interval lies beyond the band; NOT_COMPARABLE when the facts differ or are unknown, when either side has no
figure, when the run has too few samples for an interval, or when the interval straddles the band's edge.

The run's side comes from what it recorded (`run_facts_of`: its receipt's host, hardware, engine, model and preset,
and its bench summary) or, during `reproduce`, from the same facts of its session (`run_facts`); the record's side
from the record and its speed sweep (`record_side`). Ranked above `registry` (7½) to name this host's GPU as the
registry's catalog does (`registry.export.catalog_gpu_id`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from servepack.bench.stats import MIN_INTERVAL_N, Stat
from servepack.bench.summary import BenchSummary, Cell
from servepack.engine.locate import EngineFacts
from servepack.errors import ServepackError, UsageError
from servepack.host.fingerprint import HostFingerprint
from servepack.records.claims import RunView, load_run
from servepack.records.receipt import HardwareAttribution
from servepack.redact import is_secret_name
from servepack.registry.export.hardware import catalog_gpu_id
from servepack.registry.format import LoadedRecord, load_record
from servepack.reproduce import DEFAULT_TOLERANCE_PCT
from servepack.reproduce.protocol import (
    CannotReproduce,
    Protocol,
    RecordCell,
    RecordFacts,
    RecordFigure,
    facts_with_launch,
    protocol_of,
    record_facts,
)
from servepack.reproduce.translate import ALIASES, Translation, translate
from servepack.store import REDACTED

Verdict = Literal["REPRODUCED", "FASTER", "SLOWER", "NOT_COMPARABLE"]
VERDICTS: tuple[Verdict, ...] = ("REPRODUCED", "FASTER", "SLOWER", "NOT_COMPARABLE")
State = Literal["same", "differs", "unknown"]
METRICS = ("decode_tok_s", "prefill_tok_s", "ttft_ms")
LOWER_IS_FASTER = frozenset({"ttft_ms"})


@dataclass(frozen=True)
class LocalFacts:
    """This host, engine build and model file, as found (None where not known, with the reason)."""

    hardware_ids: tuple[str, ...]
    hardware_label: str
    engine_version: str | None = None
    engine_sha256: str | None = None
    engine_commit: str | None = None
    engine_unknown: str | None = None
    model_sha256: str | None = None
    model_path: str | None = None
    model_unknown: str | None = None
    model_instance_id: str | None = None
    pack_model_sha256: str | None = None
    launch_flags: Mapping[str, object] | None = None  # the flags the run served with (None: not known)
    ran: bool = False  # a run's facts (what it served), not this host's before a launch


@dataclass(frozen=True)
class FactCheck:
    """One comparability fact: the record against this host."""

    what: str
    state: State
    detail: str

    def line(self) -> str:
        return f"{self.what}: {self.state.upper()}: {self.detail}"


def _hardware(rec: RecordFacts, here: LocalFacts) -> FactCheck:
    rec_ids = " / ".join(rec.hardware_ids) + (f" ({rec.hardware_label})" if rec.hardware_label else "")
    side = "the run's host" if here.ran else "this host"
    shown = f"record {rec_ids} vs {side} {' / '.join(dict.fromkeys(here.hardware_ids))} ({here.hardware_label})"
    same = bool(set(rec.hardware_ids) & set(here.hardware_ids))
    return FactCheck("hardware", "same" if same else "differs", shown)


def _version(text: str | None) -> str | None:
    if not text:
        return None
    first = text.strip().splitlines()[0]
    return first.split("version:", 1)[1].strip() if "version:" in first else first.strip()


def _engine(rec: RecordFacts, here: LocalFacts) -> FactCheck:
    shown = f"record {rec.engine_name} " + (repr(rec.engine_version) if rec.engine_version else "(no version stated)")
    if here.engine_unknown:
        return FactCheck("engine build", "unknown", f"{shown}; the local engine is not known: {here.engine_unknown}")
    shown += f" vs {'the run' if here.ran else 'local'} {_version(here.engine_version)!r}"
    if rec.engine_sha256 and here.engine_sha256:
        same = rec.engine_sha256 == here.engine_sha256
        return FactCheck("engine build", "same" if same else "differs",
                         f"{shown}; binary sha256 {rec.engine_sha256[:12]}… vs {here.engine_sha256[:12]}…")
    if rec.engine_commit and here.engine_commit:
        a, b = rec.engine_commit, here.engine_commit
        same = a.startswith(b) or b.startswith(a)
        return FactCheck("engine build", "same" if same else "differs", f"{shown}; commit {a} vs {b}")
    rv, lv = _version(rec.engine_version), _version(here.engine_version)
    if rv and lv and rv == lv:
        return FactCheck("engine build", "same", f"{shown}; same version string, no commit or binary hash to compare")
    if rv and lv:
        return FactCheck("engine build", "differs", shown)
    return FactCheck("engine build", "unknown", f"{shown}; the record states no version, commit or binary hash")


def _model(rec: RecordFacts, here: LocalFacts) -> FactCheck:
    if rec.model_sha256 is None:
        return FactCheck("model", "unknown", f"the record pins no model bytes (model instance "
                         f"{rec.model_instance_id}); the same model cannot be confirmed")
    pin = f"record pins sha256 {rec.model_sha256[:12]}… ({rec.model_sha256_where})"
    if here.model_sha256 is None:
        pack = here.pack_model_sha256
        other = (f"; the pack pins other bytes ({pack[:12]}…): its model would be refused too"
                 if pack and pack != rec.model_sha256 else "")
        why = here.model_unknown if here.ran else f"no local file: {here.model_unknown}"
        return FactCheck("model", "unknown", f"{pin}; {why}{other}")
    same = here.model_sha256 == rec.model_sha256
    refused = "" if here.ran else ", a run is refused"
    return FactCheck("model", "same" if same else "differs",
                     f"{pin}; {'the run served' if here.ran else 'local'} {here.model_path} sha256 "
                     f"{here.model_sha256[:12]}…" + ("" if same else f": not the record's weights{refused}"))


def _flag_name(name: str) -> str:
    bare = name.lstrip("-")
    return ALIASES.get(bare, bare)


def _flag_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _flags_differ(record: Mapping[str, object], run: Mapping[str, object]) -> list[str]:
    """Each flag the run served with otherwise than the record's launch (secret values are not compared)."""
    rec = {_flag_name(k): _flag_value(v) for k, v in record.items()}
    mine = {_flag_name(k): _flag_value(v) for k, v in run.items()}
    out = []
    for name in sorted(set(rec) | set(mine)):
        a, b = mine.get(name), rec.get(name)
        if a == b or is_secret_name(name) or REDACTED in (a, b):
            continue
        out.append(f"--{name} {a if a is not None else '(not set)'} vs {b if b is not None else '(not set)'}")
    return out


def comparability(rec: RecordFacts, here: LocalFacts, translation: Translation | None,
                  launch_unknown: str | None = None) -> list[FactCheck]:
    """Hardware, engine build, model bytes, then the launch: every rewrite that changes what is measured, the flags
    the run served with where they are not the record's, or why the record's launch is not known."""
    checks = [_hardware(rec, here), _engine(rec, here), _model(rec, here)]
    if translation is None:
        return [*checks, FactCheck("launch", "unknown", launch_unknown or "the record states no launch")]
    checks += [FactCheck("launch", "differs", b) for b in translation.blockers]
    if here.launch_flags is not None and (diff := _flags_differ(translation.flags, here.launch_flags)):
        checks.append(FactCheck("launch", "differs", "the run served with other flags than the record's launch (run vs "
                                "record): " + "; ".join(diff)))
    return checks


def not_comparable(checks: list[FactCheck]) -> list[str]:
    """The reasons a reproduction cannot be claimed: every fact that differs or is unknown (stated in full first)."""
    return [f"{c.what} {c.state}" + (f": {c.detail}" if c.what == "launch" else "")
            for c in checks if c.state != "same"]


@dataclass(frozen=True)
class MetricVerdict:
    cell: str
    metric: str
    verdict: Verdict
    reason: str
    record: RecordFigure | None
    run: Stat | None
    band: tuple[float, float] | None

    def as_dict(self) -> dict[str, Any]:
        r, s = self.record, self.run
        return {
            "cell": self.cell, "metric": self.metric, "verdict": self.verdict, "reason": self.reason,
            "record_median": r.median if r else None, "record_samples": list(r.samples) if r else [],
            "record_source": r.source if r else None,
            "run_median": s.median if s else None, "run_n": s.n if s else 0,
            "run_ci95": [s.ci95_low, s.ci95_high] if s and s.ci95_low is not None and s.ci95_high is not None
            else None,
            "band": list(self.band) if self.band else None,
        }


def band(record: RecordFigure, tolerance_pct: float) -> tuple[float, float]:
    """The record's spread joined with ±tolerance around its median."""
    lo, hi = record.median * (1 - tolerance_pct / 100), record.median * (1 + tolerance_pct / 100)
    if record.samples:
        lo, hi = min(lo, *record.samples), max(hi, *record.samples)
    return lo, hi


def _relation(metric: str, above: bool) -> Verdict:
    return ("SLOWER" if above else "FASTER") if metric in LOWER_IS_FASTER else ("FASTER" if above else "SLOWER")


def judge(cell: str, metric: str, record: RecordFigure | None, run: Stat | None, *, reasons: list[str],
          tolerance_pct: float = DEFAULT_TOLERANCE_PCT) -> MetricVerdict:
    """One metric of one cell: the verdict and its reason, in figures."""
    def out(verdict: Verdict, why: str, b: tuple[float, float] | None = None) -> MetricVerdict:
        return MetricVerdict(cell, metric, verdict, why, record, run, b)

    if record is None:
        return out("NOT_COMPARABLE", f"the record states no {metric} figure for {cell}")
    if run is None or run.n == 0 or run.median is None:
        return out("NOT_COMPARABLE", f"no {metric} samples were measured in {cell}")
    b = band(record, tolerance_pct)
    figures = (f"run median {run.median:,.2f} (n={run.n}, {run.interval_text()}) vs record {record.median:,.2f} "
               f"(band {b[0]:,.2f}–{b[1]:,.2f}: its spread and ±{tolerance_pct:g}%)")
    if reasons:
        return out("NOT_COMPARABLE", f"{'; '.join(reasons)}: a reproduction cannot be claimed; {figures}", b)
    if run.n < MIN_INTERVAL_N or run.ci95_low is None or run.ci95_high is None:
        return out("NOT_COMPARABLE", f"too few samples for a 95% interval (n={run.n} < {MIN_INTERVAL_N}); run "
                   f"with --samples {MIN_INTERVAL_N} or more; {figures}", b)
    lo, hi = run.ci95_low, run.ci95_high
    if b[0] <= lo and hi <= b[1]:
        return out("REPRODUCED", f"the run's 95% interval lies inside the band; {figures}", b)
    if lo > b[1]:
        return out(_relation(metric, True), f"the run's whole 95% interval lies above the band; {figures}", b)
    if hi < b[0]:
        return out(_relation(metric, False), f"the run's whole 95% interval lies below the band; {figures}", b)
    return out("NOT_COMPARABLE", f"inconclusive: the run's 95% interval straddles the band's edge; take more "
               f"samples or state a --tolerance; {figures}", b)


def hardware_ids(host: HostFingerprint, detected_id: str, attributed_id: str | None) -> tuple[str, ...]:
    """The ids this host is known by: detected, attributed (by a pack), and the registry catalog's id of its GPU."""
    ids = [detected_id, *([attributed_id] if attributed_id else [])]
    if host.gpus and (found := catalog_gpu_id(host.gpus[0].name, host.gpus[0].memory_total_bytes)):
        ids.append(found[0])  # the registry's own id for this GPU, as its records name it
    return tuple(dict.fromkeys(ids))


def run_facts(host: HostFingerprint, hardware: HardwareAttribution, engine: EngineFacts | None,
              model: tuple[str, str] | None, flags: Mapping[str, object] | None) -> LocalFacts:
    """The run's side: the host and attribution it ran on, the engine build, the model (sha256, path) it served and
    its preset's flags, as its session holds them and its receipt records them."""
    return LocalFacts(
        hardware_ids=hardware_ids(host, hardware.detected_id, hardware.attributed_id), hardware_label=host.label(),
        engine_version=engine.version_text if engine else None, engine_sha256=engine.sha256 if engine else None,
        engine_commit=engine.commit if engine else None,
        engine_unknown=None if engine else "the run recorded no engine build",
        model_sha256=model[0] if model else None, model_path=model[1] if model else None,
        model_unknown=None if model else "the run recorded no model file", launch_flags=flags, ran=True)


def run_facts_of(view: RunView) -> LocalFacts:
    """A results directory's side, from its receipt."""
    r = view.receipt
    return run_facts(r.host, r.hardware, r.engine, (r.model.sha256, r.model.path) if r.model else None,
                     r.preset.flags if r.preset else None)


@dataclass(frozen=True)
class RecordSide:
    """A record as judged: its facts, its launch as local flags (None with the reason when servepack cannot read
    one), and its protocol (cells and figures; None when it states none)."""

    loaded: LoadedRecord
    facts: RecordFacts
    translation: Translation | None
    protocol: Protocol | None
    launch_error: ServepackError | None = None


def sweep_beside(loaded: LoadedRecord) -> LoadedRecord | None:
    """The record's speed sweep where an export or a registry checkout keeps it (speed-sweep/<id>.json)."""
    for sid in loaded.record.get("speed_sweep_ids") or []:
        for cand in (loaded.path.parent.parent / "speed-sweep" / f"{sid}.json", loaded.path.parent / f"{sid}.json"):
            if cand.is_file():
                try:
                    sweep = load_record(cand)
                except UsageError:
                    continue
                if sweep.kind == "speed_sweep":
                    return sweep
    return None


def record_side(loaded: LoadedRecord, sweep: LoadedRecord | None, *, source: str | None = None) -> RecordSide:
    """The record's facts, launch and protocol (from its notes, else `sweep`'s rows, else its llama-bench arguments);
    cells above the launch's --parallel slots left out, each with a note. A record that is not a recipe is a
    UsageError; one whose launch servepack cannot read keeps the reason (`reproduce` raises it, a comparison states
    it as the launch fact)."""
    translation: Translation | None = None
    error: ServepackError | None = None
    try:
        facts = record_facts(loaded)
    except CannotReproduce as exc:
        facts, error = facts_with_launch(loaded, None), exc
    else:
        try:
            translation = translate(facts.engine_name, list(facts.arguments),
                                    source=f"{source or loaded.path}: {facts.arguments_where}")
        except UsageError as exc:  # no translation for its engine, or a launch it cannot serve as recorded
            error = exc
    try:
        protocol = protocol_of(loaded, sweep, translation.bench if translation else None)
    except UsageError:
        if error is not None:  # the launch's reason first, as `reproduce` states it
            raise error from None
        raise
    slots = translation.flags.get("parallel") if translation else None
    if protocol is not None and isinstance(slots, int) and not isinstance(slots, bool) and slots > 0:
        protocol = protocol.within_slots(slots, f"--parallel {slots} in the record's launch")
    return RecordSide(loaded, facts, translation, protocol, error)


def _run_stat(cell: Cell, metric: str, rec: RecordCell) -> Stat:
    if metric == "ttft_ms":
        return cell.ttft_ms
    if metric == "prefill_tok_s":
        return cell.prompt_per_ttft_tok_s_client
    fig = rec.figures.get(metric)
    if rec.concurrency > 1 and fig is not None and fig.source.startswith("speed sweep"):
        return cell.decode_tok_s_aggregate  # a sweep row's decode at concurrency > 1 is the aggregate
    return cell.decode_tok_s_client


def verdicts(protocol: Protocol, summary: BenchSummary | None, reasons: list[str], tolerance_pct: float
             ) -> list[MetricVerdict]:
    """Each record cell × metric against the run's cell of the same prompt size, concurrency and output length."""
    run_cells = summary.cells if summary else []
    cells = {(c.context_tokens, c.concurrency, c.gen_tokens): c for c in run_cells}
    measured = ", ".join(f"{c.context_tokens:,} ctx × {c.gen_tokens:,} gen @c{c.concurrency}" for c in run_cells)
    out = []
    for rec in protocol.cells:
        cell = cells.get((rec.context_tokens, rec.concurrency, rec.gen_tokens))
        for metric in METRICS:
            if cell is None:
                out.append(MetricVerdict(rec.label, metric, "NOT_COMPARABLE", f"the run has no cell {rec.label} "
                                         f"(it measured {measured or 'none'})", rec.figures.get(metric), None, None))
                continue
            out.append(judge(rec.label, metric, rec.figures.get(metric), _run_stat(cell, metric, rec),
                             reasons=reasons, tolerance_pct=tolerance_pct))
    return out


@dataclass(frozen=True)
class Judgement:
    """A run against a record: the facts, then one verdict per record cell and metric."""

    run: str
    record: str
    record_id: str
    checks: tuple[FactCheck, ...]
    tolerance_pct: float
    verdicts: tuple[MetricVerdict, ...] = field(default_factory=tuple)
    protocol_notes: tuple[str, ...] = ()

    @property
    def comparable(self) -> bool:
        return all(c.state == "same" for c in self.checks)

    @property
    def not_reproduced(self) -> list[str]:
        return [f"{v.metric} at {v.cell}: {v.verdict}: {v.reason}" for v in self.verdicts if v.verdict != "REPRODUCED"]

    def as_dict(self) -> dict[str, Any]:
        return {"run": self.run, "record": self.record, "record_id": self.record_id,
                "comparable": self.comparable, "tolerance_pct": self.tolerance_pct,
                "comparability": [{"what": c.what, "state": c.state, "detail": c.detail} for c in self.checks],
                "protocol_notes": list(self.protocol_notes),
                "verdicts": [v.as_dict() for v in self.verdicts], "not_reproduced": self.not_reproduced}


def judge_run(view: RunView, side: RecordSide, *, tolerance_pct: float = DEFAULT_TOLERANCE_PCT) -> Judgement:
    """The run's recorded facts against the record's, then its bench cells against the record's, metric by metric.
    A run without a bench summary, or a record that states no protocol, is a UsageError: nothing to set side by side."""
    if view.bench is None:
        raise UsageError(f"{view.path}: no bench summary to compare with a registry record; give a run that benched")
    if side.protocol is None:
        raise UsageError(f"{side.loaded.path}: the record states no protocol (no cell in its notes, no speed sweep "
                         "beside it, no llama-bench arguments); nothing to compare the run with")
    checks = comparability(side.facts, run_facts_of(view), side.translation,
                           str(side.launch_error) if side.launch_error else None)
    rows = verdicts(side.protocol, view.bench, not_comparable(checks), tolerance_pct)
    return Judgement(str(view.path), str(side.loaded.path), side.facts.id, tuple(checks), tolerance_pct,
                     tuple(rows), side.protocol.notes)


def judge_run_dir(run_dir: Path, side: RecordSide, *, tolerance_pct: float = DEFAULT_TOLERANCE_PCT) -> Judgement:
    """`judge_run` on a results directory read back."""
    return judge_run(load_run(run_dir), side, tolerance_pct=tolerance_pct)
