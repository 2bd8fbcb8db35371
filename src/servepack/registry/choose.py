"""`servepack registry choose MODEL`: the recipes for a model, ranked by measured decode, each judged runnable here.

Matching: MODEL is a model id (`laguna-s-2.1`, punctuation folded: `Laguna-S-2.1` is the same) or a model-instance
id, exactly; when nothing has that id, a documented alias, exactly: a model's name or Hugging Face repository, a
model instance's repository or served name, a lab recipe's weights repository (`RegistryDB.model_match`). A part of
a name never matches (`laguna` is not `laguna-s-2-1`, `wren-7b` is not `wren-7b-instruct`). The registry's
recipes and the lab's recipes are both recipes.

Ranking: decode tokens/s at concurrency 1 (per stream) from the recipe's speed-sweep row nearest the requested
context (ties: the larger context); a recipe without a sweep falls back to the decode samples its notes state
(LocalMaxxing's form), at the prompt size the notes give, or a lab recipe's proof (its speed gate). A row whose
concurrency is null is not taken as concurrency 1: its figure says concurrency unknown and ranks after every figure
of known concurrency and context (a null context likewise); a lab recipe's reported proof (a third party's figure,
no gate run; `reported`) ranks after every measured figure; recipes without a figure come last. Every figure says
which context it was measured at and whether that is the one asked for.

Runnable here: five checks (hardware, engine, model, memory, context), each ok / not ok / unknown with the reason
in words (`registry.checks`); runnable = every check ok. What this host offers is `registry.host_facts`'s, what a
record says `registry.recipe_facts`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from servepack.errors import ServepackError, UsageError
from servepack.registry.checks import (
    GIB,
    LocalModel,
    RunCheck,
    check_context,
    check_engine,
    check_hardware,
    check_memory,
    check_model,
    find_model,
    instance_weights,
    kv_cache_bytes,
)
from servepack.registry.db import RegistryDB
from servepack.registry.format import LoadedRecord
from servepack.registry.host_facts import EngineProbe, HostFacts, this_host, with_held_cards
from servepack.registry.queries import StoredRecord, SweepRow
from servepack.registry.recipe_facts import (
    DEFAULT_CONTEXT,
    PROMPT_IN_NOTES,
    ModelPins,
    measured_context,
    model_pins,
    recipe_context,
    unrendered,
)

__all__ = [
    "DEFAULT_CONTEXT",
    "GIB",
    "Candidate",
    "Choice",
    "EngineProbe",
    "Figure",
    "HostFacts",
    "LocalModel",
    "ModelPins",
    "RunCheck",
    "check_hardware",
    "check_memory",
    "check_model",
    "choose",
    "figure_for",
    "kv_cache_bytes",
    "model_pins",
    "recipe_context",
    "this_host",
]

Runnable = Literal["yes", "no", "unknown"]


@dataclass(frozen=True)
class Figure:
    """A measured decode figure and where it was read."""

    decode_tok_s: float
    context_tokens: int | None
    concurrency: int | None  # None: the record leaves it null — unknown, never taken as 1
    source: str
    exact: bool  # measured at the requested context
    reported: bool = False  # a third party's figure (a lab recipe's reported proof), not measured: ranked below

    def as_dict(self) -> dict[str, Any]:
        return {"decode_tok_s": self.decode_tok_s, "context_tokens": self.context_tokens,
                "concurrency": self.concurrency, "source": self.source, "at_requested_context": self.exact,
                "reported": self.reported}


@dataclass(frozen=True)
class Candidate:
    recipe_id: str
    version: int
    model_instance_id: str | None
    hardware_id: str | None
    engine: str | None
    figure: Figure | None
    checks: tuple[RunCheck, ...]
    kind: str = "recipe"
    model_id: str | None = None

    @property
    def runnable(self) -> Runnable:
        if any(c.ok is False for c in self.checks):
            return "no"
        return "yes" if all(c.ok for c in self.checks) else "unknown"

    def why_not(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if c.ok is not True]

    def as_dict(self) -> dict[str, Any]:
        return {"recipe_id": self.recipe_id, "kind": self.kind, "version": self.version, "model_id": self.model_id,
                "model_instance_id": self.model_instance_id, "hardware_id": self.hardware_id, "engine": self.engine,
                "runnable": self.runnable,
                "figure": self.figure.as_dict() if self.figure else None,
                "checks": [c.as_dict() for c in self.checks]}


@dataclass(frozen=True)
class Choice:
    model: str
    context: int
    hardware_filter: str | None
    host_hardware_id: str
    host_label: str
    candidates: tuple[Candidate, ...]
    elsewhere: tuple[str, ...] = ()  # hardware ids of recipes for the model left out by --hardware
    matched_by: str = "model id"  # how MODEL named them: model id, model instance id, alias

    @property
    def best_runnable(self) -> Candidate | None:
        return next((c for c in self.candidates if c.runnable == "yes"), None)

    def as_dict(self) -> dict[str, Any]:
        best = self.best_runnable
        return {"model": self.model, "matched_by": self.matched_by, "context_tokens": self.context,
                "hardware_filter": self.hardware_filter,
                "host": {"hardware_id": self.host_hardware_id, "label": self.host_label},
                "best_runnable": best.recipe_id if best else None,
                "candidates": [c.as_dict() for c in self.candidates],
                "left_out_hardware": list(self.elsewhere)}


def _nearest(rows: list[SweepRow], context: int) -> SweepRow | None:
    usable = [r for r in rows if (r.decode_tok_s_per_stream or r.decode_tok_s) is not None and r.status != "failed"
              and r.context_tokens is not None]
    if not usable:
        return None
    known = [r for r in usable if r.concurrency is not None]
    if known:  # a null concurrency is unknown: used only when no row states one
        low = min(r.concurrency or 1 for r in known)
        usable = [r for r in known if r.concurrency == low]
    return min(usable, key=lambda r: (abs((r.context_tokens or 0) - context), -(r.context_tokens or 0)))


def figure_for(loaded: LoadedRecord, sweeps: list[tuple[StoredRecord, list[SweepRow]]], context: int
               ) -> Figure | None:
    """Decode at (or nearest) `context`: from the recipe's sweeps, else the samples its notes state, else a lab
    recipe's latest proof."""
    best: tuple[SweepRow, str] | None = None
    for sweep, rows in sweeps:
        row = _nearest(rows, context)
        if row and (best is None or (row.concurrency is not None, -abs((row.context_tokens or 0) - context)) >
                    (best[0].concurrency is not None, -abs((best[0].context_tokens or 0) - context))):
            best = (row, sweep.id)
    if best:
        row, sid = best
        decode = row.decode_tok_s_per_stream if row.decode_tok_s_per_stream is not None else row.decode_tok_s
        assert decode is not None
        return Figure(decode, row.context_tokens, row.concurrency, f"speed sweep {sid}", row.context_tokens == context)
    if loaded.kind == "lab_recipe":
        proofs = loaded.record.get("proof")
        latest = proofs[0] if isinstance(proofs, list) and proofs and isinstance(proofs[0], dict) else {}
        tps = latest.get("tps")
        if isinstance(tps, int | float) and not isinstance(tps, bool) and tps > 0 and latest.get("reported") is True:
            return Figure(float(tps), None, 1, f"reported by {latest.get('on') or 'a third party'} "
                          f"({latest.get('src') or 'no source named'}, {latest.get('at') or 'an unstated day'}): "
                          "not measured, none of the lab's gates run", False, reported=True)
        if isinstance(tps, int | float) and not isinstance(tps, bool) and tps > 0:
            return Figure(float(tps), None, 1, f"the lab's proof of {latest.get('at') or 'an unstated day'} (its speed "
                          "gate: one short prompt at concurrency 1, decode to the answer's end)", False)
        return None
    try:
        decode_sets = [s for s in loaded.samples if s.metric == "decode_tok_s"]
    except ServepackError:
        decode_sets = []
    if not decode_sets:
        return None
    s = decode_sets[0]
    ctx = None
    for text in loaded.notes.values():
        m = PROMPT_IN_NOTES.search(text)
        if m:
            ctx = int(m.group(1).replace(",", ""))
            break
    return Figure(s.median, ctx, 1, f"the record's notes ({len(s.samples)} decode samples, median recomputed)",
                  ctx == context)


def _rank(c: Candidate) -> tuple[int, float, bool, str]:
    """Figures of known concurrency and context first (by decode), then figures where either is null (unknown,
    never read as concurrency 1 or as the asked context), then reported figures (a third party's, not measured),
    then recipes without a figure."""
    f = c.figure
    group = (3 if f is None else 2 if f.reported
             else 0 if f.concurrency is not None and f.context_tokens is not None else 1)
    return group, -(f.decode_tok_s if f else 0), not (f and f.exact), c.recipe_id


def choose(db: RegistryDB, model: str, host: HostFacts, *, context: int = DEFAULT_CONTEXT,
           hardware: str | None = None, model_file: Path | None = None) -> Choice:
    """Every newest recipe for `model` (on `hardware` when given), ranked, each with its runnable-here checks."""
    if context <= 0:
        raise UsageError(f"--context {context}: give a positive number of tokens")
    every = db.recipes(model=model)
    if not every:
        raise UsageError(f"{db.path}: no recipe for model {model!r} in the registry (matched as a model id, a model "
                         "instance id or a documented alias, exactly); `servepack registry list` shows the recipes "
                         "held")
    _models, _instances, how = db.model_match(model)
    host = with_held_cards(host, [c.loaded.record for c in db.latest("card")])
    chosen = [r for r in every if hardware is None or r.fields.hardware_id == hardware]
    elsewhere = tuple(sorted({r.fields.hardware_id or "?" for r in every} - {hardware} if hardware else set()))
    out = []
    for rec in chosen:
        loaded = rec.loaded
        sweeps = [(s, db.rows_of(s)) for s in db.sweeps_of(rec.id)]
        pins = model_pins(loaded)
        check, local = check_model(pins, find_model(pins, host, model_file))
        instance = (db.get(rec.fields.model_instance_id, kind="model_instance")
                    if rec.fields.model_instance_id else None)
        checks = (check_hardware(loaded, host), check_engine(loaded, host), check,
                  check_memory(loaded, host, local, context, sweeps, instance_weights(instance)),
                  check_context(context, recipe_context(loaded), measured_context(loaded, sweeps),
                                unrendered(loaded)))
        out.append(Candidate(rec.id, rec.version, rec.fields.model_instance_id, rec.fields.hardware_id,
                             rec.fields.engine, figure_for(loaded, sweeps, context), checks, rec.kind,
                             rec.model_id))
    out.sort(key=_rank)
    return Choice(model, context, hardware, host.hardware_id, host.label, tuple(out), elsewhere, how)
