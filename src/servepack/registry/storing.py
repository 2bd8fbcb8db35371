"""Storing one record in the registry database: one transaction per file (`BEGIN IMMEDIATE` … `COMMIT`), the same
bytes again "already present", the same content in other bytes another source, other content a new version, the
file's bytes kept and hashed as they are (where its secrets are is said; every read redacts them), its index and a
sweep's rows written beside it, a lab recipe's indexed context kept that of its rendered launch (`RegistryWrites`).
The rules are in `registry.db`'s docstring.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from servepack.errors import UsageError
from servepack.registry.format import LoadedRecord, RecordKind, lab_launch_of, parse_record
from servepack.registry.format.lab_launch import CannotRender, LabLaunch
from servepack.registry.index import index_fields, int_field, lab_context, lab_engine, number_field
from servepack.registry.queries import RegistryReads, StoredRecord, without_secrets

StoreOutcome = Literal["imported", "new-version", "same-record", "already-present"]


class DatabaseUnwritable(UsageError):
    """The database itself cannot take a write (read-only, locked, disk full): the whole import stops."""


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def content_sha256(record: dict[str, Any]) -> str:
    """sha256 of a record's canonical JSON (keys sorted, no whitespace, UTF-8 as is)."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Stored:
    """What one import did to the database."""

    outcome: StoreOutcome
    record_id: str
    kind: RecordKind
    version: int
    earlier_source: str | None = None
    redacted: tuple[str, ...] = ()  # where the record held a secret, replaced by <redacted> before it was stored


class RegistryWrites(RegistryReads):
    """The writes of an open registry database (`RegistryDB`): each file's import one transaction."""

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE … COMMIT; anything raised (Ctrl-C included) rolls back."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    @contextmanager
    def bulk(self) -> Iterator[None]:
        """Many imports in a row: the journal is SQLite's write-ahead log with `synchronous=NORMAL` while they run
        (each file still its own transaction, committed and safe against a crash of the process; a commit no longer
        waits for the disk), then the rollback journal again, so read commands find the file as before. Where
        another connection holds the file, the journal mode cannot change: the imports run as they are (slower), and
        a file left in WAL mode is put back by the next import that can."""
        mode = self.conn.execute("PRAGMA journal_mode").fetchone()[0]
        try:
            self.conn.execute("PRAGMA journal_mode = WAL").fetchone()
            self.conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.OperationalError:
            pass
        try:
            yield
        finally:
            self.conn.execute("PRAGMA synchronous = FULL")
            back = mode if mode in ("delete", "truncate", "persist") else "delete"
            try:
                self.conn.execute(f"PRAGMA journal_mode = {back}").fetchone()
            except sqlite3.OperationalError:
                pass  # another connection holds the file; it stays in WAL mode, which every reader handles

    def store(self, raw: bytes, loaded: LoadedRecord, source: str) -> Stored:
        """Keep `raw` (already parsed and validated as `loaded`) in one transaction; see `registry.db`'s docstring."""
        redacted = without_secrets(raw, loaded)[2]  # where its secrets are, said; the bytes are kept as they are
        try:
            return replace(self._store(raw, loaded, source), redacted=redacted)
        except sqlite3.OperationalError as exc:
            raise DatabaseUnwritable(f"{self.path}: the registry database cannot be written ({exc}); nothing of "
                                     f"{source} was kept: free space, wait for the other import, or give --db "
                                     "another path") from None

    def _store(self, raw: bytes, loaded: LoadedRecord, source: str) -> Stored:
        sha = hashlib.sha256(raw).hexdigest()
        rid = loaded.id
        content = content_sha256(loaded.record)
        with self.transaction() as c:
            seen = c.execute("SELECT r.id, r.kind, r.version, s.source FROM sources s JOIN records r "
                             "ON r.pk = s.record_pk WHERE s.sha256 = ?", (sha,)).fetchone()
            if seen:
                if seen[1] == "engine_profile":  # a database an older servepack indexed: its recipes' columns too
                    self._index_lab(c, profile_id=seen[0])
                return Stored("already-present", seen[0], seen[1], seen[2], seen[3])
            same = c.execute("SELECT pk, kind, version FROM records WHERE kind = ? AND id = ? AND content_sha256 = ?",
                             (loaded.kind, rid, content)).fetchone()
            if same:
                pk, kind, version = same
                outcome: StoreOutcome = "same-record"
            else:
                last = c.execute("SELECT max(version) FROM records WHERE kind = ? AND id = ?",
                                 (loaded.kind, rid)).fetchone()[0]
                version = (last or 0) + 1
                f = index_fields(loaded)
                cur = c.execute(
                    "INSERT INTO records (id, version, kind, content_sha256, recipe_id, model_instance_id, "
                    "hardware_id, engine, context_tokens, concurrency, model_id, normalised) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (rid, version, loaded.kind, content, f.recipe_id, f.model_instance_id, f.hardware_id, f.engine,
                     f.context_tokens, f.concurrency, f.model_id,
                     json.dumps(list(loaded.normalised)) if loaded.normalised else None))
                pk = cur.lastrowid
                c.executemany("INSERT OR IGNORE INTO names VALUES (?, ?, ?)", [(pk, n, r) for n, r in f.names])
                kind = loaded.kind
                outcome = "imported" if version == 1 else "new-version"
                if loaded.kind == "speed_sweep":
                    c.executemany("INSERT INTO sweep_rows VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
                        (pk, i, int_field(x.get("context_tokens")), int_field(x.get("concurrency")),
                         int_field(x.get("output_tokens")), number_field(x.get("decode_tok_s")),
                         number_field(x.get("decode_tok_s_per_stream")), number_field(x.get("prefill_tok_s")),
                         number_field(x.get("ttft_ms_p50")),
                         x.get("status") if isinstance(x.get("status"), str) else None)
                        for i, x in enumerate(loaded.record.get("rows") or []) if isinstance(x, dict)])
            c.execute("INSERT INTO sources (sha256, record_pk, bytes, source, envelope, imported_at) "
                      "VALUES (?, ?, ?, ?, ?, ?)", (sha, pk, raw, source, int(loaded.envelope_meta is not None),
                                                    utc_now()))
            if kind == "lab_recipe" and outcome != "same-record":
                self._index_lab(c, recipe_pk=pk)
            elif kind == "engine_profile":
                self._index_lab(c, profile_id=rid)
        return Stored(outcome, rid, kind, version)

    def _index_lab(self, c: sqlite3.Connection, *, recipe_pk: int | None = None, profile_id: str | None = None
                   ) -> None:
        """Keep the indexed context and concurrency of lab recipes those of their launch as the lab renders it from
        the newest engine profile held (`registry.format.lab_launch`), as every read takes them: the recipe at
        `recipe_pk` (just imported), or every version of every recipe that names `profile_id` (just imported). A
        recipe whose profile is not held keeps the <n>k of its file name (and concurrency 1); one whose launch cannot
        be rendered has neither (NULL: unknown)."""
        where, args = ("r.pk = ?", (recipe_pk,)) if recipe_pk is not None else ("r.kind = 'lab_recipe'", ())
        rows = c.execute("SELECT r.pk, s.source, s.bytes FROM records r JOIN sources s ON s.record_pk = r.pk WHERE "
                         f"{where} AND s.rowid = (SELECT min(rowid) FROM sources x WHERE x.record_pk = r.pk)",
                         args).fetchall()
        held: dict[str, StoredRecord | None] = {}
        for pk, source, raw in rows:
            loaded = parse_record(raw, Path(source), "lab_recipe", check=False)
            pid, _ = lab_engine(loaded.record.get("engine"))
            if pid is None or (profile_id is not None and pid != profile_id):
                continue
            if pid not in held:
                held[pid] = self.get(pid, kind="engine_profile")
            profile = held[pid]
            ctx: int | None = lab_context(loaded.path.stem)
            conc: int | None = 1
            if profile is not None:
                launch = lab_launch_of(replace(loaded, related={"engine_profile": profile.loaded.record}))
                if isinstance(launch, LabLaunch):
                    ctx, conc = launch.ctx, launch.seqs
                elif isinstance(launch, CannotRender):
                    ctx = conc = None
            c.execute("UPDATE records SET context_tokens = ?, concurrency = ? WHERE pk = ? AND "
                      "(context_tokens IS NOT ? OR concurrency IS NOT ?)", (ctx, conc, pk, ctx, conc))
