"""What a record says it measured and on what: its facts (hardware, engine, model pin, launch), its protocol
(context marks, output length, samples, concurrency, warmup, prompt reuse) and its figures per cell.

Read from the record's notes (a LocalMaxxing run's sentences, or servepack's own export) and, where the notes
state no cell, from its speed sweep's rows. Nothing is guessed: what the record does not state stays None and
is reported as not reproducible.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any

from servepack.errors import UsageError
from servepack.packs.schema import MAX_COUNT, MAX_STREAMS, MAX_TOKENS
from servepack.registry.format import (
    LAB_PROFILE_FIX,
    LoadedRecord,
    SampleSet,
    lab_engine_name,
    lab_legacy_recipe,
    launch_steps,
    parse_notes,
)
from servepack.registry.format.lab_launch import CannotRender, render_lab_launch
from servepack.registry.format.lemonade import is_lemonade, lemonade_llamacpp

METRICS = ("decode_tok_s", "prefill_tok_s", "ttft_ms")
_WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                     "thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())}
_SHA = re.compile(r"SHA-?256\D{0,20}?([0-9a-f]{64})", re.I)
_COMMIT = re.compile(r"\(([0-9a-f]{7,40})\)")
_SP_CELL = re.compile(r"At ([\d,]+) prompt tokens, concurrency (\d+), (\d+) of (\d+) samples fresh\.")
_CONTAINED = re.compile(r"contained ([\d,]+) endpoint tokens")
_GENERATED = re.compile(r"(?:generated ([\d,]+) tokens|asked for ([\d,]+) generated tokens)")
_CONCURRENCY = re.compile(r"at concurrency (\w+)", re.I)
_WARMUP = re.compile(r"with (\d+) warmup|(no warmup)", re.I)


def count(word: str) -> int | None:
    """'seven' or '7' → 7."""
    w = word.lower().replace(",", "")
    return int(w) if w.isdigit() else _WORDS.get(w)


@dataclass(frozen=True)
class RecordFacts:
    """Who measured what, where: the facts a reproduction is compared on before any number."""

    id: str
    hardware_ids: tuple[str, ...]
    hardware_label: str | None
    engine_name: str
    engine_version: str | None
    engine_commit: str | None
    engine_sha256: str | None
    model_instance_id: str
    model_sha256: str | None
    model_sha256_where: str | None
    pack_id: str | None
    arguments: tuple[str, ...]
    arguments_where: str
    fidelity: str | None


def _sources(record: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    meta = record.get("metadata") or {}
    return {k: v for k, v in meta.items() if isinstance(v, dict)}


SERVING_TOOLS = ("llama-server", "llama-bench", "llama-cli", "server")
DEFAULT_IMAGE_TOOL = "llama-server"  # llama.cpp's server images start llama-server when no entrypoint is given
LEMONADE_KIND = "lab profile (lemonade: llama.cpp)"  # a lemonade profile's launch, served as llama.cpp's


class CannotReproduce(UsageError):
    """The record states no launch servepack can run here; the message says why, in the record's own fields."""


def _strings(v: object) -> list[str] | None:
    return list(v) if isinstance(v, list) and all(isinstance(a, str) for a in v) else None


def _shell_split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return []


def _tool_step(steps: object) -> list[str] | None:
    """The step of a script launch that starts a llama.cpp tool (the others download, build or wait)."""
    for step in steps if isinstance(steps, list) else []:
        argv = _strings(step)
        if argv and any(t in PurePosixPath(argv[0]).name for t in SERVING_TOOLS):
            return argv
    return None


@dataclass(frozen=True)
class Launch:
    """Where a record's argv came from, and the argv (binary first)."""

    arguments: tuple[str, ...]
    where: str
    kind: str  # native argv, docker, script, lab profile
    fidelity: str | None


def record_launch(loaded: LoadedRecord) -> Launch:
    """The record's launch as argv, from every form the registry carries; CannotReproduce saying why when none.

    In order: the record's own launch contract (launch.arguments with launch.binary or launch.entrypoint; a docker
    launch's image; a script launch's llama.cpp step), then the tokenized command the record observed
    (metadata.<source>.tokenized.arguments, native argv: what a launch was promoted from, taken only where the
    launch itself states no argv), and a lab recipe's launch as the lab renders it from its engine profile
    (`registry.format.lab_launch`: program, args, and the settings named in `where`; for a lemonade profile, the
    llama-server args and context it states, `registry.format.lemonade`, served as llama.cpp's). A launch with no
    argv — an endpoint-only record (tokenized without arguments, or lossy), a reference launch (a URL), a compose
    file — cannot be reproduced here, and the message names what the record states instead.
    """
    r = loaded.record
    if loaded.kind == "lab_recipe":
        profile = loaded.related.get("engine_profile")
        ref = str(r.get("engine") or "")
        legacy = lab_legacy_recipe(r)
        if legacy and not isinstance(profile, dict):
            raise CannotReproduce(f"{loaded.path}: cannot reproduce here because the lab recipe's launch is that of "
                                  f"registry recipe {legacy!r} as the registry's plugin export "
                                  "(plugin/v2/recipes.json) carries it (lab.py render: legacy), not an engine profile; "
                                  "reproduce that recipe itself if the registry database holds it")
        skipped = [str(x) for x in loaded.related.get("engine_profile_skipped") or []]
        also = f" ({'; '.join(skipped)})" if skipped else ""
        missing = loaded.related.get("engine_profile_missing")
        if not isinstance(profile, dict) and missing:  # a recipe given as a file: nothing usable beside it
            raise CannotReproduce(f"{loaded.path}: cannot reproduce here because the lab recipe's launch is rendered "
                                  f"from engine profile {ref.split('@')[0]!r}, which {missing}{also}; "
                                  f"{LAB_PROFILE_FIX} and reproduce the recipe by its id")
        if not isinstance(profile, dict):
            raise CannotReproduce(f"{loaded.path}: cannot reproduce here because the lab recipe's launch is rendered "
                                  f"from engine profile {ref.split('@')[0]!r}, which the registry database does not "
                                  "hold; import the registry's engines/ folder too")
        try:
            rendered = render_lab_launch(r, profile)
        except CannotRender as exc:
            raise CannotReproduce(f"{loaded.path}: {exc}; so the lab recipe cannot be reproduced here") from None
        settings = rendered.settings_words()
        file = loaded.related.get("engine_profile_file")
        named = f"engine profile {rendered.profile_id}" + (f" (from {file['path']})" if isinstance(file, dict) else "")
        if is_lemonade(profile, rendered):  # lemonade starts llama-server with the args and context it states
            try:
                lemon = lemonade_llamacpp(rendered.profile_id, rendered)
            except CannotRender as exc:
                raise CannotReproduce(f"{loaded.path}: {exc}; so the lab recipe cannot be reproduced here") from None
            return Launch(lemon.argv, f"{named}: lemonade's llama-server launch, args from {lemon.args_where}, "
                          f"context {lemon.ctx:,} from {lemon.ctx_where}; " + "; ".join(lemon.notes),
                          LEMONADE_KIND, "translated")
        if rendered.launched in ("host", "native"):  # a program the host runs (no image): its argv names the program
            field_ = "command" if rendered.launched == "host" else "args"
            return Launch(rendered.argv, f"{named} {field_} ({rendered.launched}: a program on the host, no image; "
                          f"{settings})", "lab profile", "faithful")
        return Launch((rendered.program or DEFAULT_IMAGE_TOOL, *rendered.args), f"{named} args (image "
                      f"{rendered.image}; {settings})", "lab profile", "faithful")
    why: list[str] = []
    launch: dict[str, Any] = r["launch"] if isinstance(r.get("launch"), dict) else {}
    kind = launch.get("kind")
    largs = _strings(launch.get("arguments"))
    if kind in ("docker", "docker-compose") and (largs is not None or launch.get("entrypoint")):
        entry = launch.get("entrypoint") if isinstance(launch.get("entrypoint"), str) else None
        if kind == "docker-compose" and largs is None:
            why.append("launch is a compose file of the recorded host")
        else:
            return Launch(tuple([entry or DEFAULT_IMAGE_TOOL, *(largs or [])]),
                          f"launch.arguments of docker image {launch.get('image')} (run natively here)", "docker",
                          "faithful")
    steps_where, script_steps = launch_steps(launch) if kind == "script" else (None, [])
    if kind == "script":
        steps = _tool_step(script_steps)
        if steps:
            return Launch(tuple(steps), str(steps_where), "script", "faithful")
    if largs is not None and isinstance(launch.get("binary"), str):
        return Launch(tuple([launch["binary"], *largs]), "launch.binary + launch.arguments", str(kind), "faithful")
    if largs is not None and largs and kind != "reference":
        return Launch(tuple([DEFAULT_IMAGE_TOOL, *largs]), "launch.arguments", str(kind), "faithful")
    for src, meta in _sources(r).items():
        tok = meta.get("tokenized")
        if not isinstance(tok, dict):
            continue
        args = _strings(tok.get("arguments"))
        if args:
            return Launch(tuple(args), f"metadata.{src}.tokenized.arguments", "native argv", tok.get("fidelity"))
        steps = _tool_step(tok.get("steps"))
        if steps:
            return Launch(tuple(steps), f"metadata.{src}.tokenized.steps", "script", tok.get("fidelity"))
        observed = meta.get("observed_command")
        why.append(f"metadata.{src}.tokenized states no argv (fidelity {tok.get('fidelity') or 'not stated'}"
                   + (f"; it observed {str(observed)[:80]!r}" if observed else "") + "): an endpoint-only record")
    if kind == "script":
        said = (f"no step of {steps_where} starts a llama.cpp tool ("
                + "; ".join(repr(" ".join(a))[:60] for a in script_steps[:3])
                + ("; …" if len(script_steps) > 3 else "") + ")") if steps_where else "it states no steps"
        why.append(f"launch is script {(launch.get('script') or {}).get('file')!r}: {said}")
    elif kind == "reference":
        why.append(f"launch is a reference to {launch.get('url') or 'another site'} with no argv")
    elif kind:
        why.append(f"launch kind {kind} carries no arguments")
    draft = r.get("draft_launch")
    if isinstance(draft, dict):  # upstream recipe.schema.json: "Never a launch contract"
        made: dict[str, Any] = draft["synthesized"] if isinstance(draft.get("synthesized"), dict) else {}
        why.append(f"its draft_launch (docker image {draft.get('image')}, template {made.get('template')!r}) is "
                   "synthesized and unverified, for the registry's acceptance harness, not the launch the record "
                   "measured (the registry's recipe schema: never a launch contract), so it is not reproduced as "
                   "this record")
    raise CannotReproduce(f"{loaded.path}: cannot reproduce here because the record states no command to run: "
                          + "; ".join(why or ["no launch"]))


def record_facts(loaded: LoadedRecord) -> RecordFacts:
    """The facts of a recipe record (the registry's or the lab's); CannotReproduce when it states no launch."""
    r = loaded.record
    if loaded.kind not in ("recipe", "lab_recipe"):
        hint = f"give its recipe ({r.get('recipe_id')}), which holds the launch" if loaded.kind == "speed_sweep" \
            else "give a recipe"
        raise UsageError(f"{loaded.path}: a {loaded.kind.replace('_', ' ')} record; {hint}")
    return facts_with_launch(loaded, record_launch(loaded))


def facts_with_launch(loaded: LoadedRecord, launch: Launch | None) -> RecordFacts:
    """A recipe record's facts with its launch as read (`record_launch`), or with none where it states no command
    servepack can run (a comparison still states its hardware, engine and model; its arguments are then empty)."""
    r = loaded.record
    args: tuple[str, ...] = launch.arguments if launch else ()
    where = launch.where if launch else "no launch"
    fidelity = launch.fidelity if launch else None
    metas = _sources(r)
    if loaded.kind == "lab_recipe":
        profile = loaded.related.get("engine_profile")
        return RecordFacts(
            id=loaded.id, hardware_ids=(str(r.get("card")),), hardware_label=None,
            engine_name="llama.cpp" if launch is not None and launch.kind == LEMONADE_KIND else
            lab_engine_name(r, profile) or "?", engine_version=None, engine_commit=None,
            engine_sha256=None, model_instance_id=str(r.get("weights") or "").split("@")[0], model_sha256=None,
            model_sha256_where=None, pack_id=None, arguments=args, arguments_where=where, fidelity=fidelity)
    sha, pin_where = _model_pin(metas)
    engine = r.get("engine") or {}
    version = engine.get("version")
    hw = [r["hardware_id"]] + [v["detected_hardware_id"] for v in metas.values()
                               if isinstance(v.get("detected_hardware_id"), str)]
    commit = _COMMIT.search(version or "")
    return RecordFacts(
        id=r["id"], hardware_ids=tuple(dict.fromkeys(hw)),
        hardware_label=next((v["hardware_label"] for v in metas.values() if isinstance(v.get("hardware_label"), str)),
                            None),
        engine_name=str(engine.get("name")), engine_version=version, engine_commit=commit.group(1) if commit else None,
        engine_sha256=next((v["engine_sha256"] for v in metas.values() if isinstance(v.get("engine_sha256"), str)),
                           None),
        model_instance_id=r["model_instance_id"], model_sha256=sha, model_sha256_where=pin_where,
        pack_id=next((v["pack_id"] for v in metas.values() if isinstance(v.get("pack_id"), str)), None),
        arguments=args, arguments_where=where, fidelity=fidelity,
    )


def _model_pin(metas: dict[str, dict[str, Any]]) -> tuple[str | None, str | None]:
    """The sha256 of the weights the record names: servepack's field, else a 'SHA-256 <hex>' in its notes."""
    for src, meta in metas.items():
        if isinstance(meta.get("model_sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", meta["model_sha256"]):
            return meta["model_sha256"], f"metadata.{src}.model_sha256"
    for src, meta in metas.items():
        m = _SHA.search(meta.get("notes") or "") if isinstance(meta.get("notes"), str) else None
        if m:
            return m.group(1).lower(), f"metadata.{src}.notes"
    return None, None


@dataclass(frozen=True)
class RecordFigure:
    """One metric of one cell as the record states it: a median, and its samples when it lists them."""

    metric: str
    median: float
    samples: tuple[float, ...]
    source: str


@dataclass(frozen=True)
class RecordCell:
    context_tokens: int
    concurrency: int
    gen_tokens: int
    samples: int | None
    figures: dict[str, RecordFigure] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.context_tokens:,} ctx × {self.gen_tokens:,} gen @c{self.concurrency}"


@dataclass(frozen=True)
class Protocol:
    """The record's own protocol, as the bench runs it; `notes` say where each part was read."""

    cells: tuple[RecordCell, ...]
    warmup: int
    cache_prompt: bool
    notes: tuple[str, ...]

    @property
    def context_marks(self) -> tuple[int, ...]:
        return tuple(sorted({c.context_tokens for c in self.cells}))

    def within_slots(self, slots: int, said: str) -> Protocol:
        """The protocol without the cells whose concurrency is above the launch's `slots` (`said`: where that count
        was read), each left out with a note: above its slots a launch queues requests, so the figure measured would
        not be the record's."""
        above = [c for c in self.cells if c.concurrency > slots]
        if not above:
            return self
        notes = tuple(f"cell {c.label} left out: concurrency {c.concurrency:,} is above the launch's {slots:,} "
                      f"slot(s) ({said}); there it would queue, not measure the record's figure" for c in above)
        return Protocol(tuple(c for c in self.cells if c.concurrency <= slots), self.warmup, self.cache_prompt,
                        self.notes + notes)

    @property
    def concurrency(self) -> tuple[int, ...]:
        return tuple(sorted({c.concurrency for c in self.cells}))

    @property
    def gen_tokens(self) -> int:
        return self.cells[0].gen_tokens

    @property
    def samples(self) -> int | None:
        """Measured rounds per cell (a round sends `concurrency` requests)."""
        rounds = [-(-c.samples // c.concurrency) for c in self.cells if c.samples]
        return max(rounds) if rounds else None

    def bench_overrides(self, samples: int | None) -> dict[str, Any]:
        """BenchSettings values that run this protocol; `samples` (from --samples) replaces the record's count."""
        n = samples or self.samples
        if n is None:
            raise UsageError("the record states no sample count; give --samples N")
        if not 1 <= n <= MAX_COUNT:
            raise UsageError(f"the record states {n:,} samples per cell, outside 1 to {MAX_COUNT:,}; give --samples N")
        return {"context_marks": self.context_marks, "gen_tokens": self.gen_tokens, "samples": n,
                "concurrency": self.concurrency, "warmup": self.warmup, "cache_prompt": self.cache_prompt}


def _figures(sets: list[SampleSet], where: str) -> dict[str, RecordFigure]:
    return {s.metric: RecordFigure(s.metric, s.stated_median, s.samples, where) for s in sets}


def _servepack_cells(text: str, where: str) -> list[RecordCell]:
    """servepack's export notes: 'At N prompt tokens, concurrency C, f of n samples fresh.' then that cell's samples."""
    gen = _GENERATED.search(text)
    if gen is None:
        return []
    g = int((gen.group(1) or gen.group(2)).replace(",", ""))
    heads = list(_SP_CELL.finditer(text))
    cells = []
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        segment = text[m.end():end]
        cells.append(RecordCell(int(m.group(1).replace(",", "")), int(m.group(2)), g, int(m.group(4)),
                                _figures(parse_notes(segment), where)))
    return cells


def _localmaxxing_cell(text: str, where: str, record: Mapping[str, Any]) -> RecordCell | None:
    """LocalMaxxing's sentences: 'Six prompts contained 8,192 endpoint tokens …; every request generated 1,024
    tokens at concurrency one.' with 'Decode samples were …' for the figures."""
    contained, gen = _CONTAINED.search(text), _GENERATED.search(text)
    if contained is None or gen is None:
        return None
    conc_m = _CONCURRENCY.search(text)
    conc = count(conc_m.group(1)) if conc_m else (record.get("serving") or {}).get("max_concurrency")
    sets = parse_notes(text)
    n = max((len(s.samples) for s in sets), default=0) or None
    return RecordCell(int(contained.group(1).replace(",", "")), int(conc or 1),
                      int((gen.group(1) or gen.group(2)).replace(",", "")), n, _figures(sets, where))


def _sweep_cells(sweep: LoadedRecord) -> list[RecordCell]:
    cells = []
    for row in sweep.record["rows"]:
        if not all(isinstance(row.get(k), int) for k in ("context_tokens", "concurrency", "output_tokens")):
            continue
        where = f"speed sweep {sweep.record['id']}"
        figs: dict[str, RecordFigure] = {}
        for metric, key in (("decode_tok_s", "decode_tok_s"), ("prefill_tok_s", "prefill_tok_s"),
                            ("ttft_ms", "ttft_ms_p50")):
            if isinstance(row.get(key), int | float):
                figs[metric] = RecordFigure(metric, float(row[key]), (), f"{where} rows[].{key} (a median only)")
        cells.append(RecordCell(row["context_tokens"], row["concurrency"], row["output_tokens"],
                                row.get("samples") if isinstance(row.get("samples"), int) else None, figs))
    return cells


LLAMA_BENCH_DEFAULTS = {"n-prompt": (512,), "n-gen": (128,), "repetitions": (5,), "n-depth": (0,)}


def _bench_cells(bench: Mapping[str, tuple[int, ...]]) -> list[RecordCell]:
    """llama-bench's own arguments as cells: one per prompt size (+ depth), its generation length, its repetitions
    (llama-bench's defaults, -p 512 -n 128 -r 5 -d 0, where the record leaves one out)."""
    b = {**LLAMA_BENCH_DEFAULTS, **bench}
    gen = max(b["n-gen"]) or LLAMA_BENCH_DEFAULTS["n-gen"][0]
    return [RecordCell(p + d, 1, gen, b["repetitions"][0]) for p in b["n-prompt"] if p > 0 for d in b["n-depth"]]


def protocol_of(loaded: LoadedRecord, sweep: LoadedRecord | None = None,
                bench: Mapping[str, tuple[int, ...]] | None = None) -> Protocol | None:
    """The record's protocol from its notes (servepack's or LocalMaxxing's form), else its speed sweep's rows, else
    the measurement its llama-bench command states (`bench`, from `Translation.bench`)."""
    notes: list[str] = []
    cells: list[RecordCell] = []
    warmup, cache = 0, False
    for src, text in loaded.notes.items():
        where = f"metadata.{src}.notes"
        try:
            found = _servepack_cells(text, where)
            if not found and (one := _localmaxxing_cell(text, where, loaded.record)) is not None:
                found = [one]
                notes.append("prompts: servepack's own corpus, each sized to the record's endpoint tokens; the "
                             "record does not publish its prompt texts")
        except UsageError as exc:
            raise UsageError(f"{loaded.path}: {where}: {exc}") from None
        if found:
            cells = found
            w = _WARMUP.search(text)
            warmup = int(w.group(1)) if w and w.group(1) else 0
            cache = bool(re.search(r"prompt caching enabled", text))
            reuse = "on" if cache else "off (fresh prompts)"
            notes.append(f"cells, output length and sample counts from {where}; warmup {warmup} "
                         f"({'stated' if w else 'none stated'}); prompt reuse {reuse}")
            break
    if not cells and sweep is not None:
        cells = _sweep_cells(sweep)
        if cells:
            notes.append(f"cells from speed sweep {sweep.record['id']}'s rows (medians only; no spread); warmup 0, "
                         "fresh prompts")
    reps = max(bench.get("repetitions") or (0,)) if bench else 0
    if cells and reps:  # the record ran llama-bench -r N: each figure it states is over N repetitions (issue 33)
        fewer = [c for c in cells if (c.samples or 0) < reps]
        if fewer:
            stated = ", ".join(sorted({f"{c.samples:,}" if c.samples else "none" for c in fewer}))
            cells = [replace(c, samples=reps) if (c.samples or 0) < reps else c for c in cells]
            notes.append(f"samples per cell: {reps:,}, the record's llama-bench -r {reps:,} (each figure llama-bench "
                         f"reports is over {reps:,} repetitions); the cells above state {stated} sample(s), so "
                         f"{reps:,} are run")
    if not cells and bench:
        cells = _bench_cells(bench)
        if cells:
            warmup = 0 if "no-warmup" in bench else 1
            notes.append("cells from the record's llama-bench arguments (-p/-d prompt sizes, -n generated tokens, -r "
                         "repetitions; llama-bench's defaults where absent); llama-bench times prompt processing and "
                         "generation as separate tests, servepack's cell times both in one request")
    if not cells:
        return None
    _check_ranges(cells, warmup, str(loaded.path))
    return Protocol(tuple(cells), warmup, cache, tuple(notes))


def _check_ranges(cells: list[RecordCell], warmup: int, where: str) -> None:
    """The record's cells within what a pack may ask for (packs.schema's ranges); UsageError naming the first."""
    for cell in cells:
        for what, value, high in (("context tokens", cell.context_tokens, MAX_TOKENS),
                                  ("generated tokens", cell.gen_tokens, MAX_TOKENS),
                                  ("concurrency", cell.concurrency, MAX_STREAMS)):
            if not 1 <= value <= high:
                raise UsageError(f"{where}: a cell states {what} {value:,}, outside 1 to {high:,}; this record "
                                 "cannot be reproduced as stated: fix the record")
    if not 0 <= warmup <= MAX_COUNT:
        raise UsageError(f"{where}: the record states {warmup:,} warmup requests, outside 0 to {MAX_COUNT:,}")

