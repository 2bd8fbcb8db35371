"""Reading the registry database back: a record as held (`StoredRecord`: read again from its verbatim bytes, its
provenance, redacted again on every read), a sweep's rows (`SweepRow`), and the queries of `RegistryReads` — by id,
the newest of each id, a model's names, recipes filtered on the index, sweeps, lab runs, counts, and what `registry
list` shows read from the index (`listing`: `Listing` of `Listed`). The layout and the rules they read are in
`registry.db`'s docstring.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from servepack.redact import redact_record_bytes
from servepack.redact.document import MAY_HOLD_SECRET_RULE, may_hold_secret
from servepack.registry.format import LoadedRecord, RecordKind, lab_launch_of, parse_record
from servepack.registry.format.lab_launch import CannotRender, LabLaunch
from servepack.registry.format.record import METRICS_MISSING
from servepack.registry.index import IndexFields, lab_engine, slug


@dataclass(frozen=True)
class Provenance:
    source: str
    sha256: str
    imported_at: str
    envelope: bool


@dataclass(frozen=True)
class StoredRecord:
    """One version of a record as held: the record read back from its verbatim bytes, and where it came from."""

    pk: int
    id: str
    version: int
    versions: int
    kind: RecordKind
    fields: IndexFields
    loaded: LoadedRecord
    sources: tuple[Provenance, ...]
    redacted: tuple[str, ...] = ()  # where a secret value was, replaced by <redacted> (`redact_document`)

    @property
    def model_id(self) -> str | None:
        """The model id as the record spells it (`qwen3.6-35b-a3b`), not as the index folds it for matching
        (`qwen3-6-35b-a3b`): a lab recipe's `model`, a model instance's `model_id`, a model's `id`, a recipe's API
        relationship; else the indexed one."""
        r = self.loaded.record
        rel = self.loaded.api_fields.get("relationships")
        model = rel.get("model") if isinstance(rel, dict) else None
        spelled = {"lab_recipe": r.get("model"), "model_instance": r.get("model_id"), "model": r.get("id"),
                   "benchmark_run": r.get("model_id"),
                   "recipe": model.get("id") if isinstance(model, dict) else None}.get(self.kind)
        return spelled if isinstance(spelled, str) and spelled else self.fields.model_id

    def listed(self) -> Listed:
        """What `registry list` shows of it (a sweep's rows counted as its record holds them)."""
        rows = self.loaded.record.get("rows") if self.kind == "speed_sweep" else None
        return Listed(self.pk, self.id, self.version, self.versions, self.kind, self.fields, self.model_id,
                      len(rows or []), self.sources, self.loaded.normalised, self.redacted)

    def as_dict(self) -> dict[str, Any]:
        return self.listed().as_dict()


@dataclass(frozen=True)
class Listed:
    """A record as `registry list` shows it: its index fields, the model id as the record spells it, and, for a
    speed sweep, how many rows it holds; with the detail --json shows too: its provenance (`sources`), how servepack
    read fields it did not take as is (`normalised`) and where its secrets were (`redacted`), each None where it was
    not read (the text shows none of them). Read from the index (`RegistryReads.listing`), or from the record
    itself where a field needs it (`StoredRecord.listed`)."""

    pk: int
    id: str
    version: int
    versions: int
    kind: RecordKind
    fields: IndexFields
    model_id: str | None
    rows: int
    sources: tuple[Provenance, ...] | None
    normalised: tuple[str, ...] | None
    redacted: tuple[str, ...] | None

    def as_dict(self) -> dict[str, Any]:
        if self.sources is None or self.normalised is None or self.redacted is None:
            raise ValueError(f"{self.id}: listed without its sources, notes and secrets; list it with detail=True")
        return {"id": self.id, "kind": self.kind, "version": self.version, "versions": self.versions,
                "recipe_id": self.fields.recipe_id, "model_instance_id": self.fields.model_instance_id,
                "hardware_id": self.fields.hardware_id, "engine": self.fields.engine,
                "context_tokens": self.fields.context_tokens, "concurrency": self.fields.concurrency,
                "model_id": self.model_id, "normalised": list(self.normalised),
                "sources": [{"source": s.source, "sha256": s.sha256, "imported_at": s.imported_at,
                             "envelope": s.envelope} for s in self.sources],
                "redacted": list(self.redacted)}


@dataclass(frozen=True)
class Listing:
    """What `registry list` shows, read in a few queries (`RegistryReads.listing`): the newest recipes (filtered),
    each one's speed sweeps and the model it is for (a stored recipe names only its model instance: the held
    instance's model id, else None), the sweeps whose recipe is not held (unfiltered only), and the counts."""

    recipes: list[Listed]
    sweeps: dict[str, list[Listed]]  # by recipe id
    models: dict[str, str | None]  # by recipe id
    orphans: list[Listed]
    counts: dict[str, int]


@dataclass(frozen=True)
class SweepRow:
    sweep_id: str
    context_tokens: int | None
    concurrency: int | None
    output_tokens: int | None
    decode_tok_s: float | None
    decode_tok_s_per_stream: float | None
    prefill_tok_s: float | None
    ttft_ms_p50: float | None
    status: str | None


def without_secrets(raw: bytes, loaded: LoadedRecord) -> tuple[bytes, LoadedRecord, tuple[str, ...]]:
    """`raw` (read as `loaded`) with every secret redacted (see `registry.db`'s docstring), read again when that changed
    it, and where the secrets were."""
    clean, places = redact_record_bytes(raw)
    if clean == raw:
        return raw, loaded, places
    again = parse_record(clean, loaded.path, loaded.kind, check=False)
    return clean, replace(again, normalised=loaded.normalised, related=loaded.related), places


class RegistryReads:
    """The queries of an open registry database (`RegistryDB`): every read takes the newest version of each id."""

    path: Path
    conn: sqlite3.Connection

    _LATEST = "version = (SELECT max(version) FROM records x WHERE x.kind = r.kind AND x.id = r.id)"
    _COLUMNS = ("pk, id, version, kind, recipe_id, model_instance_id, hardware_id, engine, context_tokens, "
                "concurrency, model_id, normalised")
    # When kinds share an id, a lookup by id takes the first of these (a recipe before its other namesakes).
    _KIND_ORDER = ("CASE kind WHEN 'recipe' THEN 0 WHEN 'lab_recipe' THEN 1 WHEN 'speed_sweep' THEN 2 "
                   "WHEN 'model_instance' THEN 3 WHEN 'model' THEN 4 ELSE 5 END")

    def _stored(self, row: tuple[Any, ...]) -> StoredRecord:
        pk, rid, version, kind, recipe_id, model, hw, engine, ctx, conc, model_id, _normalised = row
        sources = self.conn.execute("SELECT source, sha256, imported_at, envelope, bytes FROM sources "
                                    "WHERE record_pk = ? ORDER BY imported_at, rowid", (pk,)).fetchall()
        versions = self.conn.execute("SELECT max(version) FROM records WHERE kind = ? AND id = ?",
                                     (kind, rid)).fetchone()[0]
        first = sources[0]
        # redacted again on every read: a file of an older servepack may hold a secret
        _raw, loaded, redacted = without_secrets(first[4], parse_record(first[4], Path(first[0]), kind, check=False))
        if kind == "lab_recipe":
            profile, _ = lab_engine(loaded.record.get("engine"))
            held = self.get(profile, kind="engine_profile") if profile else None
            if held is not None:
                loaded = replace(loaded, related={"engine_profile": held.loaded.record})
                # its launch as the lab renders it from the held profile, not the <n>k of its file name (indexed
                # when the profile may not have been imported yet): unknown when it cannot be rendered
                launch = lab_launch_of(loaded)
                if isinstance(launch, LabLaunch):
                    ctx, conc = launch.ctx, launch.seqs
                elif isinstance(launch, CannotRender):
                    ctx = conc = None
        return StoredRecord(pk, rid, version, versions, kind,
                            IndexFields(recipe_id, model, hw, engine, ctx, conc, model_id), loaded,
                            tuple(Provenance(s[0], s[1], s[2], bool(s[3])) for s in sources), redacted)

    def get(self, record_id: str, version: int | None = None, *, kind: RecordKind | None = None
            ) -> StoredRecord | None:
        """The newest version of `record_id` (or the given version); None when the database has no such id."""
        where, args = "id = ?", [record_id]
        if kind is not None:
            where += " AND kind = ?"
            args.append(kind)
        if version is None:
            row = self.conn.execute(f"SELECT {self._COLUMNS} FROM records WHERE {where} ORDER BY "
                                    f"{self._KIND_ORDER}, version DESC LIMIT 1", args).fetchone()
        else:
            row = self.conn.execute(f"SELECT {self._COLUMNS} FROM records WHERE {where} AND version = ? ORDER BY "
                                    f"{self._KIND_ORDER} LIMIT 1", [*args, version]).fetchone()
        return self._stored(row) if row else None

    def latest(self, kind: RecordKind | None = None) -> list[StoredRecord]:
        """The newest version of every record id (of one kind), by id."""
        where = "kind = ? AND " if kind else ""
        rows = self.conn.execute(f"SELECT {self._COLUMNS} FROM records r WHERE {where}{self._LATEST} ORDER BY id, "
                                 "kind", (kind,) if kind else ()).fetchall()
        return [self._stored(r) for r in rows]

    def model_match(self, query: str) -> tuple[set[str], set[str], str]:
        """The model ids and model-instance ids MODEL names, and how: its model id or instance id exactly, else a
        documented alias exactly (a model's name or repository, an instance's repository or served name); never
        a part of a name. Empty sets when nothing is named so."""
        q = slug(query)
        if not q:
            return set(), set(), "nothing"
        latest = f"JOIN records r ON r.pk = n.record_pk AND r.{self._LATEST}"

        def named(role: str) -> list[tuple[str, str | None, str | None]]:
            return self.conn.execute(f"SELECT r.kind, r.model_id, r.model_instance_id FROM names n {latest} "
                                     "WHERE n.name = ? AND n.role = ?", (q, role)).fetchall()

        models = {q} if named("model_id") else set()
        instances = {i for _, _, i in named("instance") if i}
        if models or instances:
            return models, instances, "model id" if models else "model instance id"
        for kind, model_id, instance_id in named("alias"):
            if kind in ("model", "model_instance") and model_id:
                models.add(model_id)
            if kind == "model_instance" and instance_id:
                instances.add(instance_id)
            if kind in ("recipe", "lab_recipe") and instance_id:
                instances.add(instance_id)
        return models, instances, "alias"

    def _recipe_rows(self, model: str | None, hardware_id: str | None, engine: str | None,
                     min_context: int | None) -> list[tuple[Any, ...]]:
        """The index rows of the newest recipes `recipes` filters (a lab recipe's context is compared once read)."""
        clauses = ["kind IN ('recipe', 'lab_recipe')", self._LATEST]
        args: list[str | int] = []
        if hardware_id:
            clauses.append("hardware_id = ?")
            args.append(hardware_id)
        if engine:
            clauses.append("lower(engine) = lower(?)")
            args.append(engine)
        if min_context is not None:  # a lab recipe's context is its rendered launch's: compared once read
            clauses.append("(kind = 'lab_recipe' OR context_tokens >= ?)")
            args.append(min_context)
        if model is not None:
            models, instances, _how = self.model_match(model)
            if not models and not instances:
                return []
            held = [i for (i,) in self.conn.execute(
                f"SELECT id FROM records r WHERE kind = 'model_instance' AND {self._LATEST} AND model_id IN "
                f"({','.join('?' * len(models))})", sorted(models)).fetchall()] if models else []
            inst = sorted(instances | set(held))
            clauses.append(f"(model_id IN ({','.join('?' * len(models)) or 'NULL'}) OR model_instance_id IN "
                           f"({','.join('?' * len(inst)) or 'NULL'}) OR pk IN (SELECT record_pk FROM names WHERE "
                           f"role = 'instance' AND name IN ({','.join('?' * len(inst)) or 'NULL'})))")
            args += [*sorted(models), *inst, *[slug(i) for i in inst]]
        return self.conn.execute(f"SELECT {self._COLUMNS} FROM records r WHERE {' AND '.join(clauses)} ORDER BY id",
                                 args).fetchall()

    def recipes(self, *, model: str | None = None, hardware_id: str | None = None, engine: str | None = None,
                min_context: int | None = None) -> list[StoredRecord]:
        """Newest recipes (the registry's and the lab's), filtered in SQL on the indexed fields; `model` matches
        as `model_match` says (model id, then aliases, exactly)."""
        found = [self._stored(r) for r in self._recipe_rows(model, hardware_id, engine, min_context)]
        if min_context is None:
            return found
        return [r for r in found if r.fields.context_tokens is not None and r.fields.context_tokens >= min_context]

    def _in_chunks(self, sql: str, values: Sequence[int | str], first: Sequence[str] = ()) -> list[tuple[Any, ...]]:
        """`sql` (its `IN ({})` filled with placeholders) for every value in `values`, in chunks SQLite takes; the
        parameters in `first` go before each chunk's."""
        out: list[tuple[Any, ...]] = []
        for at in range(0, len(values), 900):
            chunk = values[at:at + 900]
            out += self.conn.execute(sql.format(",".join("?" * len(chunk))), [*first, *chunk]).fetchall()
        return out

    def _sources_shown(self, pks: Sequence[int]) -> dict[int, list[tuple[Any, ...]]]:
        """The sources of records `pks` (source, sha256, imported_at, envelope, bytes), each record's first first;
        the bytes None where `secret_words` answers, by today's rule, that they hold no secret (`registry.db`)."""
        cached = self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'secret_words'"
                                   ).fetchone()
        raw = ("CASE WHEN w.may_hold = 0 THEN NULL ELSE s.bytes END FROM sources s LEFT JOIN secret_words w ON "
               "w.sha256 = s.sha256 AND w.rule = ?" if cached else "s.bytes FROM sources s")
        sources: dict[int, list[tuple[Any, ...]]] = {}
        for pk, *source in self._in_chunks(f"SELECT s.record_pk, s.source, s.sha256, s.imported_at, s.envelope, {raw} "
                                           "WHERE s.record_pk IN ({}) ORDER BY s.record_pk, s.imported_at, s.rowid",
                                           pks, (MAY_HOLD_SECRET_RULE,) if cached else ()):
            sources.setdefault(pk, []).append(tuple(source))
        return sources

    def listing(self, *, model: str | None = None, hardware_id: str | None = None, engine: str | None = None,
                min_context: int | None = None, detail: bool = False) -> Listing:
        """What `registry list` shows (`Listing`; filtered as `recipes` is, the sweeps without a recipe only when
        nothing is filtered), from the index in a few set-based queries: the recipes, every newest sweep, their
        sweeps' row counts, the held instances of the recipes' models, the counts; with `detail` (what --json
        shows) the sources of those shown too, and how servepack reads their times (`normalised`: what the import
        noted, `records.normalised`, less the note only a check makes, `METRICS_MISSING`).

        A record is read itself (its bytes parsed, redacted: `_stored`) only where a field shown needs it: a lab
        recipe (its context and concurrency are its launch's, rendered from the held engine profile), a recipe whose
        model id the index holds folded (shown as the record spells it), and, with `detail`, one whose bytes may
        hold a secret (`redact.may_hold_secret`: where they were is shown; the answer kept in `secret_words` by today's
        rule is taken without looking at the bytes again, see `registry.db`). Without `detail`, the sources,
        notes and places of a record not read itself are None.
        """
        recipe_rows = self._recipe_rows(model, hardware_id, engine, min_context)
        filtered = any(x is not None for x in (model, hardware_id, engine, min_context))
        sweep_rows = self.conn.execute(f"SELECT {self._COLUMNS} FROM records r WHERE kind = 'speed_sweep' AND "
                                       f"{self._LATEST} ORDER BY id").fetchall()
        recipe_ids = {row[1] for row in recipe_rows}
        held_recipes = {i for (i,) in self.conn.execute("SELECT DISTINCT id FROM records WHERE kind = 'recipe'")}
        shown_sweeps = [row for row in sweep_rows if row[4] in recipe_ids]
        orphan_rows = [] if filtered else [row for row in sweep_rows if row[4] not in held_recipes]
        sources = (self._sources_shown(sorted({row[0] for row in (*recipe_rows, *shown_sweeps, *orphan_rows)}))
                   if detail else {})
        counted = dict(self._in_chunks("SELECT record_pk, count(*) FROM sweep_rows WHERE record_pk IN ({}) GROUP BY "
                                       "record_pk", sorted({row[0] for row in (*shown_sweeps, *orphan_rows)})))

        def listed(row: tuple[Any, ...]) -> Listed:
            pk, rid, version, kind, recipe_id, model_inst, hw, eng, ctx, conc, model_id, normalised = row
            if (kind not in ("recipe", "speed_sweep") or (kind == "recipe" and model_id is not None)
                    or (detail and sources[pk][0][4] is not None and may_hold_secret(sources[pk][0][4]))):
                return self._stored(row).listed()
            # the newest version (version = the number of versions); a recipe's model id is not indexed (NULL), so
            # the record names none
            fields = IndexFields(recipe_id, model_inst, hw, eng, ctx, conc, model_id)
            if not detail:
                return Listed(pk, rid, version, version, kind, fields, model_id, counted.get(pk, 0), None, None, None)
            notes = tuple(n for n in json.loads(normalised) if n != METRICS_MISSING) if normalised else ()
            return Listed(pk, rid, version, version, kind, fields, model_id, counted.get(pk, 0),
                          tuple(Provenance(s[0], s[1], s[2], bool(s[3])) for s in sources[pk]), notes, ())

        recipes = [listed(row) for row in recipe_rows]
        if min_context is not None:
            recipes = [r for r in recipes if r.fields.context_tokens is not None
                       and r.fields.context_tokens >= min_context]
        sweeps: dict[str, list[Listed]] = {}
        for row in shown_sweeps:
            sweeps.setdefault(row[4], []).append(listed(row))
        return Listing(recipes, {r.id: sweeps.get(r.id, []) for r in recipes}, self._held_models(recipes),
                       [listed(row) for row in orphan_rows], self.counts())

    def _held_models(self, recipes: list[Listed]) -> dict[str, str | None]:
        """The model each recipe is for: its own model id, else its model instance's as the held instance's record
        spells it (the instance read itself: the index folds it), else None."""
        wanted = sorted({r.fields.model_instance_id for r in recipes if not r.model_id and r.fields.model_instance_id})
        rows = self._in_chunks(f"SELECT {self._COLUMNS} FROM records r WHERE kind = 'model_instance' AND "
                               f"{self._LATEST} AND id IN ({{}})", wanted)
        held: dict[str, str | None] = {}
        for row in rows:
            model = self._stored(row).loaded.record.get("model_id")
            held[row[1]] = model if isinstance(model, str) and model else None
        return {r.id: r.model_id if r.model_id or not r.fields.model_instance_id
                else held.get(r.fields.model_instance_id) for r in recipes}

    def sweeps_of(self, recipe_id: str) -> list[StoredRecord]:
        rows = self.conn.execute(
            f"SELECT {self._COLUMNS} FROM records r WHERE kind = 'speed_sweep' AND recipe_id = ? AND {self._LATEST} "
            "ORDER BY id", (recipe_id,)).fetchall()
        return [self._stored(r) for r in rows]

    def lab_runs_of(self, recipe_id: str) -> list[StoredRecord]:
        rows = self.conn.execute(
            f"SELECT {self._COLUMNS} FROM records r WHERE kind = 'lab_run' AND recipe_id = ? AND {self._LATEST} "
            "ORDER BY id", (recipe_id,)).fetchall()
        return [self._stored(r) for r in rows]

    def rows_of(self, sweep: StoredRecord) -> list[SweepRow]:
        rows = self.conn.execute("SELECT context_tokens, concurrency, output_tokens, decode_tok_s, "
                                 "decode_tok_s_per_stream, prefill_tok_s, ttft_ms_p50, status FROM sweep_rows "
                                 "WHERE record_pk = ? ORDER BY row_index", (sweep.pk,)).fetchall()
        return [SweepRow(sweep.id, *r) for r in rows]

    def orphan_sweeps(self) -> list[StoredRecord]:
        """Newest sweeps whose recipe is not in the database."""
        rows = self.conn.execute(
            f"SELECT {self._COLUMNS} FROM records r WHERE kind = 'speed_sweep' AND {self._LATEST} AND NOT EXISTS "
            "(SELECT 1 FROM records y WHERE y.kind = 'recipe' AND y.id = r.recipe_id) ORDER BY id").fetchall()
        return [self._stored(r) for r in rows]

    def counts(self) -> dict[str, int]:
        c = self.conn
        by_kind = dict(c.execute("SELECT kind, count(DISTINCT id) FROM records GROUP BY kind").fetchall())
        out = {"recipes": by_kind.get("recipe", 0), "speed_sweeps": by_kind.get("speed_sweep", 0)}
        out.update({f"{k}s" if not k.endswith("s") else k: n for k, n in sorted(by_kind.items())
                    if k not in ("recipe", "speed_sweep")})
        out.update(versions=c.execute("SELECT count(*) FROM records").fetchone()[0],
                   sources=c.execute("SELECT count(*) FROM sources").fetchone()[0])
        return out
