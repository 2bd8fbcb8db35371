"""The registry database: one SQLite file holding every imported record verbatim, with provenance and an index.

Layout (schema version `SCHEMA_VERSION`, kept in `PRAGMA user_version` and the `meta` table):

- `records`: one row per version of a record id: kind, a sha256 of its canonical content, and the fields it is
  found by (model instance, hardware id, engine, context, concurrency; a sweep's recipe id). A lab recipe's
  context and concurrency are those of its launch as rendered from the newest engine profile held, kept so
  whichever of the two is imported first (the <n>k of its file name while its profile is not held).
- `sources`: every distinct byte string imported, verbatim (`bytes`), with its sha256, where it was read
  (`source`, an absolute path) and when (`imported_at`, UTC); each names the record version it holds.
- `sweep_rows`: the rows of each speed sweep (context, concurrency, decode, prefill, TTFT), indexed.
- `secret_words`: for each source's bytes (by sha256), whether they may hold a secret (`redact.may_hold_secret`)
  and by which rule (`redact.document.MAY_HOLD_SECRET_RULE`): written when a write command closes the database
  (every source without an answer by today's rule), read by `registry list --json`, which reads a record itself
  for where its secrets were only where the answer is yes, or missing, or by another rule. A cache: a file without
  the table (an older servepack's, or opened by read commands only) is read as before, every record's bytes looked
  at; no schema version changes for it.

Versions: the same bytes again are "already present" (nothing written); the same record content in other bytes
(an API envelope of a stored record, other formatting) is kept as another source of the same version; the same id
with different content becomes a new version, and list/show/choose/lookup read the newest version of each id
(the last one imported). Nothing is ever deleted or overwritten.

Stored bytes are the file's bytes, hashed as they are (a record holding a secret too): the database is the user's
copy of what they imported. Secrets are redacted from what servepack shows or writes: every read redacts the value
of every secret-bearing flag, variable or field (`--api-key abc` in a launch's arguments or an observed command,
`LLAMA_API_KEY=abc`, `"api_key": "abc"`; `redact.redact_document`, by name, whatever the value's length),
so list, show, choose, reproduce and compare print `<redacted>` where it was and say where
(`StoredRecord.redacted`, `registry show`'s `redacted`). A name that merely contains a secret word
(`--long-prefill-token-threshold`) and a reference to a variable (`${HF_TOKEN:-}`) are no secret and are shown.

Read commands (list, show, choose, reproduce, compare: `RegistryDB.open(create=False)`) write nothing: a file of an
older schema is upgraded in place only by a write command (`registry import`); a read command upgrades a copy of it
in memory and reads that.

Every import of one file is one transaction (`BEGIN IMMEDIATE` … `COMMIT`): an interrupted or crashed import
leaves the file as it was before that record.

This module owns opening the file, its schema and their upgrade (`RegistryDB`, whose reads are
`registry.queries.RegistryReads` and writes `registry.storing.RegistryWrites`), and a record named by file or id
(`lookup`, `resolve`); where the file may be is `registry.dbfile`'s, what a record is found by `registry.index`'s.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from urllib.parse import quote

from servepack import __version__
from servepack.errors import UsageError
from servepack.redact.document import MAY_HOLD_SECRET_RULE, may_hold_secret
from servepack.registry.dbfile import (
    MAKE_ONE,
    check_db_path,
    create_db_file,
    default_db_path,
    lstat_or_none,
    same_file_still,
)
from servepack.registry.format import LoadedRecord, parse_record, read_record_bytes
from servepack.registry.format.lab_beside import with_profile_beside
from servepack.registry.index import index_fields
from servepack.registry.queries import StoredRecord, SweepRow, without_secrets
from servepack.registry.storing import DatabaseUnwritable, RegistryWrites, content_sha256, utc_now
from servepack.safepath import names_something
from servepack.store import refuse_sealed

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "DatabaseUnwritable", "RegistryDB", "StoredRecord", "SweepRow",
           "content_sha256", "default_db_path", "lookup", "resolve", "resolve_record"]

SCHEMA_VERSION = 2  # 2: every record kind the registry defines (1 held recipes and speed sweeps only)
APPLICATION_ID = 0x53505247  # "SPRG": marks the file as a servepack registry for `PRAGMA application_id`

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE records (
    pk INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    version INTEGER NOT NULL,
    kind TEXT NOT NULL,
    content_sha256 TEXT NOT NULL,
    recipe_id TEXT NOT NULL,
    model_instance_id TEXT,
    hardware_id TEXT,
    engine TEXT,
    context_tokens INTEGER,
    concurrency INTEGER,
    model_id TEXT,
    normalised TEXT,
    UNIQUE (kind, id, version),
    UNIQUE (kind, id, content_sha256)
);
CREATE TABLE sources (
    sha256 TEXT PRIMARY KEY,
    record_pk INTEGER NOT NULL REFERENCES records (pk),
    bytes BLOB NOT NULL,
    source TEXT NOT NULL,
    envelope INTEGER NOT NULL,
    imported_at TEXT NOT NULL
);
CREATE TABLE sweep_rows (
    record_pk INTEGER NOT NULL REFERENCES records (pk),
    row_index INTEGER NOT NULL,
    context_tokens INTEGER,
    concurrency INTEGER,
    output_tokens INTEGER,
    decode_tok_s REAL,
    decode_tok_s_per_stream REAL,
    prefill_tok_s REAL,
    ttft_ms_p50 REAL,
    status TEXT,
    PRIMARY KEY (record_pk, row_index)
);
CREATE TABLE names (
    record_pk INTEGER NOT NULL REFERENCES records (pk),
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    PRIMARY KEY (record_pk, name, role)
);
CREATE INDEX names_name ON names (name, role);
CREATE INDEX records_model ON records (model_instance_id);
CREATE INDEX records_hardware ON records (hardware_id);
CREATE INDEX records_engine ON records (engine);
CREATE INDEX records_recipe ON records (recipe_id);
CREATE INDEX records_context ON records (context_tokens);
CREATE INDEX records_concurrency ON records (concurrency);
CREATE INDEX records_model_id ON records (model_id);
CREATE INDEX records_kind ON records (kind, id, version);
CREATE INDEX sources_record ON sources (record_pk);
CREATE INDEX sweep_rows_cell ON sweep_rows (context_tokens, concurrency);
"""
# The cache of `redact.may_hold_secret` per source's bytes (see the docstring); made by write commands only.
SECRET_WORDS_TABLE = ("CREATE TABLE IF NOT EXISTS secret_words (sha256 TEXT PRIMARY KEY, rule TEXT NOT NULL, "
                      "may_hold INTEGER NOT NULL)")


class RegistryDB(RegistryWrites):
    """An open registry database. Use `RegistryDB.open(path)`; close it (or use it as a context manager)."""

    def __init__(self, path: Path, conn: sqlite3.Connection, *, writes: bool = False) -> None:
        self.path = path
        self.conn = conn
        self.writes = writes

    def __enter__(self) -> RegistryDB:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            if self.writes and exc_type is None:
                self.note_secret_words()
        finally:
            self.close()

    def note_secret_words(self) -> int:
        """Answer `redact.may_hold_secret` for every source held without an answer by today's rule, and keep the
        answers (`secret_words`, one transaction); how many were answered. A database that cannot take the write
        is left without them (a cache: `registry list --json` then looks at those bytes itself)."""
        try:
            with self.transaction() as c:
                c.execute(SECRET_WORDS_TABLE)
                rows = c.execute("SELECT s.sha256, s.bytes FROM sources s LEFT JOIN secret_words w ON w.sha256 = "
                                 "s.sha256 AND w.rule = ? WHERE w.sha256 IS NULL", (MAY_HOLD_SECRET_RULE,)).fetchall()
                c.executemany("INSERT OR REPLACE INTO secret_words (sha256, rule, may_hold) VALUES (?, ?, ?)",
                              [(sha, MAY_HOLD_SECRET_RULE, int(may_hold_secret(raw))) for sha, raw in rows])
        except (sqlite3.Error, DatabaseUnwritable):
            return 0
        return len(rows)

    def close(self) -> None:
        self.conn.close()

    @classmethod
    def open(cls, path: Path, *, create: bool = False) -> RegistryDB:
        """Open the database at `path`; with `create` (write commands only) make the file and schema if absent.

        Read commands (`create=False`) never create the file or the schema. The file and its journal names are
        never links; see `check_db_path`.
        """
        path = path.expanduser()
        if create:  # a database written into a finished run would make it fail `servepack verify`
            refuse_sealed(path, "--db")
        if not check_db_path(path, create=create):
            create_db_file(path)
        before = lstat_or_none(path)
        try:
            conn = sqlite3.connect(f"file:{quote(str(path))}?mode=rw", isolation_level=None, timeout=30.0, uri=True)
        except sqlite3.Error as exc:
            raise UsageError(f"{path}: cannot open the registry database ({exc}); give --db PATH") from None
        db = cls(path, conn, writes=create)
        try:
            same_file_still(path, before)
            db._check_or_create(create)
        except sqlite3.OperationalError as exc:
            db.close()
            conn.close()
            raise UsageError(f"{path}: cannot open or create the registry database ({exc}); give --db PATH "
                             "somewhere readable and writable") from None
        except sqlite3.DatabaseError as exc:
            db.close()
            conn.close()
            raise UsageError(f"{path}: not a servepack registry database ({exc}); give --db another path") from None
        except BaseException:
            db.close()
            conn.close()
            raise
        return db

    def _check_or_create(self, create: bool) -> None:
        c = self.conn
        app = c.execute("PRAGMA application_id").fetchone()[0]
        version = c.execute("PRAGMA user_version").fetchone()[0]
        tables = c.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if app == 0 and version == 0 and tables == 0:
            if not create:
                raise UsageError(f"{self.path}: an empty file, not a registry yet; {MAKE_ONE}")
            with self.transaction():
                if c.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:  # not made meanwhile
                    for statement in filter(str.strip, _SCHEMA.split(";")):
                        c.execute(statement)
                    c.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
                        ("schema_version", str(SCHEMA_VERSION)), ("created_by", f"servepack {__version__}"),
                        ("created_at", utc_now())])
                    c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return
        if app != APPLICATION_ID:
            raise UsageError(f"{self.path}: an SQLite database of another application (application_id {app}), "
                             "not a servepack registry; give --db another path")
        if version > SCHEMA_VERSION:
            raise UsageError(f"{self.path}: registry schema version {version} was written by a newer servepack "
                             f"(this one, {__version__}, reads up to {SCHEMA_VERSION}); upgrade servepack or give "
                             "--db another path")
        if version < 1:
            raise UsageError(f"{self.path}: registry schema version {version} is unknown; give --db another path")
        if version < SCHEMA_VERSION:
            if not create:
                # A read command writes nothing: it reads an upgraded copy held in memory; the file stays as it
                # was (bytes and mtime) until a write command (`registry import`) upgrades it in place.
                memory = sqlite3.connect(":memory:", isolation_level=None)
                c.backup(memory)
                c.close()
                self.conn = memory
            self._upgrade(version)

    def _upgrade(self, version: int) -> None:
        """A version-1 file (recipes and sweeps only) becomes version 2 in one transaction: the kind is free, each
        record gains its model id and the names it is found by (re-read from its verbatim bytes); nothing is lost."""
        with self.transaction() as c:
            if c.execute("PRAGMA user_version").fetchone()[0] != version:
                return  # upgraded meanwhile
            statements = [x.strip() for x in _SCHEMA.split(";") if x.strip()]
            table = next(x for x in statements if x.startswith("CREATE TABLE records "))
            c.execute(table.replace("CREATE TABLE records ", "CREATE TABLE records_v2 ", 1))
            c.execute("INSERT INTO records_v2 (pk, id, version, kind, content_sha256, recipe_id, model_instance_id, "
                      "hardware_id, engine, context_tokens, concurrency) SELECT pk, id, version, kind, content_sha256, "
                      "recipe_id, model_instance_id, hardware_id, engine, context_tokens, concurrency FROM records")
            c.execute("DROP TABLE records")  # its indexes go with it; sources and sweep_rows name `records` still
            c.execute("ALTER TABLE records_v2 RENAME TO records")
            for x in statements:
                if x.startswith(("CREATE INDEX records", "CREATE TABLE names", "CREATE INDEX names")):
                    c.execute(x)
            rows = c.execute("SELECT r.pk, r.kind, s.source, s.bytes FROM records r JOIN sources s ON s.record_pk = "
                             "r.pk WHERE s.rowid = (SELECT min(rowid) FROM sources x WHERE x.record_pk = r.pk)"
                             ).fetchall()
            for pk, kind, source, raw in rows:
                loaded = parse_record(raw, Path(source), kind, check=False)
                f = index_fields(loaded)
                c.execute("UPDATE records SET model_id = ?, normalised = ? WHERE pk = ?",
                          (f.model_id, json.dumps(list(loaded.normalised)) if loaded.normalised else None, pk))
                c.executemany("INSERT OR IGNORE INTO names VALUES (?, ?, ?)", [(pk, n, r) for n, r in f.names])
            c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
            c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def meta(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT key, value FROM meta").fetchall())


def lookup(db: RegistryDB | Path, record_id: str, version: int | None = None) -> LoadedRecord:
    """The newest version of `record_id` (or `version`) as a LoadedRecord; UsageError naming the database if none.

    The record is read back from the bytes that were imported (its `path` is where they were read).
    """
    if isinstance(db, Path):
        with RegistryDB.open(db) as opened:
            return lookup(opened, record_id, version)
    found = db.get(record_id, version)
    if found is None:
        what = f"record {record_id!r}" + (f" version {version}" if version is not None else "")
        raise UsageError(f"{db.path}: no {what} in the registry; `servepack registry list` shows what is there")
    return found.loaded


def resolve(ref: str, db_path: Path | None = None) -> tuple[LoadedRecord, StoredRecord | None]:
    """A record file (stored form or API envelope) when `ref` is a path that exists, else a registry id. A lab
    recipe's file comes with its engine profile found beside it in the user's checkout, or why none is.

    The second value is the held record (version, provenance) when it came from the database.
    """
    path = Path(ref)
    if names_something(path):
        if path.is_dir():
            raise UsageError(f"{ref}: a folder; give a record file or a registry id")
        raw = read_record_bytes(path)
        # a lab recipe's engine profile: beside the file, in the checkout that holds it (registry.format.lab_beside)
        return with_profile_beside(without_secrets(raw, parse_record(raw, path))[1]), None
    db = db_path or default_db_path()
    if not db.exists():
        raise UsageError(f"{ref}: no such file, and no registry database at {db} to look the id up in "
                         "(`servepack registry import PATH…` first, or give --db)")
    with RegistryDB.open(db) as opened:
        stored = opened.get(ref)
    if stored is None:
        raise UsageError(f"{ref}: no such file, and no record with that id in the registry at {db}; "
                         "`servepack registry list` shows the ids")
    return stored.loaded, stored


def resolve_record(ref: str, db_path: Path | None = None) -> LoadedRecord:
    """A record file when `ref` is a path that exists, else the newest version of registry id `ref`."""
    return resolve(ref, db_path)[0]
