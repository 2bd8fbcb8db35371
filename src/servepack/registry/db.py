"""The registry database: one SQLite file holding every imported record verbatim, with provenance and an index.

Layout (schema version `SCHEMA_VERSION`, kept in `PRAGMA user_version` and the `meta` table):

- `records`: one row per version of a record id: kind, a sha256 of its canonical content, and the fields it is
  found by (model instance, hardware id, engine, context, concurrency; a sweep's recipe id). A lab recipe's
  context and concurrency are those of its launch as rendered from the newest engine profile held, kept so
  whichever of the two is imported first (the <n>k of its file name while its profile is not held).
- `sources`: every distinct byte string imported, verbatim (`bytes`), with its sha256, where it was read
  (`source`, an absolute path) and when (`imported_at`, UTC); each names the record version it holds.
- `sweep_rows`: the rows of each speed sweep (context, concurrency, decode, prefill, TTFT), indexed.

Versions: the same bytes again are "already present" (nothing written); the same record content in other bytes
(an API envelope of a stored record, other formatting) is kept as another source of the same version; the same id
with different content becomes a new version, and list/show/choose/lookup read the newest version of each id
(the last one imported). Nothing is ever deleted or overwritten.

Secrets are never held: before a record is stored, the value of every secret-bearing flag, variable or field in it
(`--api-key abc` in a launch's arguments or an observed command, `LLAMA_API_KEY=abc`, `"api_key": "abc"`) is
replaced by `<redacted>` (`records.redact.redact_document`, by name, whatever the value's length), and the bytes held
are that redacted record; the places stay marked by `<redacted>`, so the record still says its launch needed a key
(`StoredRecord.redacted`, `registry show`'s `redacted`). Every read redacts again, so a file written before this
rule, or by another program, prints no secret either.

Read commands (list, show, choose, reproduce, compare: `RegistryDB.open(create=False)`) write nothing: a file of an
older schema is upgraded in place only by a write command (`registry import`); a read command upgrades a copy of it
in memory and reads that.

Every import of one file is one transaction (`BEGIN IMMEDIATE` … `COMMIT`): an interrupted or crashed import
leaves the file as it was before that record.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from servepack import __version__
from servepack.errors import UsageError
from servepack.records.lab_beside import with_profile_beside
from servepack.records.lab_launch import CannotRender, LabLaunch
from servepack.records.redact import redact_record_bytes
from servepack.records.registry import LoadedRecord, RecordKind, lab_launch_of, parse_record, read_record_bytes
from servepack.safepath import create_new, names_something
from servepack.settings import Settings
from servepack.store import refuse_sealed

SCHEMA_VERSION = 2  # 2: every record kind the registry defines (1 held recipes and speed sweeps only)
StoreOutcome = Literal["imported", "new-version", "same-record", "already-present"]
APPLICATION_ID = 0x53505247  # "SPRG": marks the file as a servepack registry for `PRAGMA application_id`
DB_FILE_NAME = "registry.sqlite3"

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


MAKE_ONE = "`servepack registry import PATH…` makes one (or give --db the path of one)"
SIDECARS = ("-journal", "-wal", "-shm")  # the files SQLite opens beside the database, by name


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"{path}: cannot look at the registry database ({exc.strerror}); give --db PATH") from None


def check_db_path(path: Path, *, create: bool) -> bool:
    """Whether a database file is at `path`; UsageError (exit 2) when the registry must not be opened there.

    Refused: a symbolic link at `path` or at any of the names SQLite opens beside it (`-journal`, `-wal`, `-shm`,
    which it would write through), anything there that is not a regular file, a directory that others may write
    to without the sticky bit (they could swap the file between the check and the open), and, for a read
    (`create=False`), no file at all: a read command never makes the registry.
    """
    for name in (path, *(path.with_name(path.name + s) for s in SIDECARS)):
        st = _lstat(name)
        if st is None:
            continue
        if stat.S_ISLNK(st.st_mode):
            raise UsageError(f"{name}: a symbolic link; the registry database and its journal are never opened "
                             "through a link: remove the link, or give --db the real file's path")
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{name}: not a regular file; give --db the path of a registry database file")
    folder = path.parent
    dst = _lstat(folder)
    if dst is None:
        if not create:
            raise UsageError(f"{path}: no registry database here (no folder {folder}); {MAKE_ONE}")
    else:
        real = os.stat(folder)
        if not stat.S_ISDIR(real.st_mode):
            raise UsageError(f"{folder}: not a folder; give --db PATH inside a folder")
        if real.st_mode & stat.S_IWOTH and not real.st_mode & stat.S_ISVTX:
            raise UsageError(f"{folder}: writable by every user and not sticky, so another user could swap the "
                             "registry file; give --db PATH in a folder of your own")
    exists = _lstat(path) is not None
    if not exists and not create:
        raise UsageError(f"{path}: no registry database here; {MAKE_ONE}")
    return exists


def _create_file(path: Path) -> None:
    """Make the (empty) database file: never through a link, never over an existing file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{path.parent}: cannot create the registry directory ({exc.strerror}); "
                         "give --db PATH somewhere writable") from None
    try:
        os.close(create_new(path))
    except FileExistsError:
        check_db_path(path, create=True)  # made meanwhile (another import): the same checks again
    except OSError as exc:
        raise UsageError(f"{path}: cannot create the registry database ({exc.strerror}); give --db PATH "
                         "somewhere writable") from None


def _same_file_still(path: Path, before: os.stat_result | None) -> None:
    """After SQLite opened `path`: the same regular file as checked before, not a link or file put there meanwhile."""
    st = _lstat(path)
    if st is None or before is None or not stat.S_ISREG(st.st_mode) or \
            (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
        raise UsageError(f"{path}: replaced while it was being opened; give --db the path of a registry database "
                         "file that nothing else is changing")


class DatabaseUnwritable(UsageError):
    """The database itself cannot take a write (read-only, locked, disk full): the whole import stops."""


def default_db_path(settings: Settings | None = None) -> Path:
    """<cache dir>/registry.sqlite3 (SERVEPACK_CACHE_DIR, else $XDG_CACHE_HOME/servepack or ~/.cache/servepack)."""
    return (settings or Settings.load()).cache_dir / DB_FILE_NAME


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def content_sha256(record: dict[str, Any]) -> str:
    """sha256 of a record's canonical JSON (keys sorted, no whitespace, UTF-8 as is)."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def slug(text: str) -> str:
    """Lowered, every run of other characters folded to one '-': `Qwen3.8-27B` and `qwen3-8-27b` are one name."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class IndexFields:
    """What a record is found by. A sweep's model, hardware and engine are its recipe's (joined at query time).

    `names`: (name, role) pairs, each name folded by `slug`: role `model_id` (the canonical model id the record
    belongs to), `instance` (a model instance id), `alias` (a documented other name: a model's name, a repository,
    a served name). `registry choose` matches a model id exactly, then aliases exactly; never a part of a name.
    """

    recipe_id: str
    model_instance_id: str | None
    hardware_id: str | None
    engine: str | None
    context_tokens: int | None
    concurrency: int | None
    model_id: str | None = None
    names: tuple[tuple[str, str], ...] = ()


def _obj(v: object) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _str(v: object) -> str | None:
    return v if isinstance(v, str) and v else None


def _names(pairs: list[tuple[object, str]]) -> tuple[tuple[str, str], ...]:
    out = []
    for value, role in pairs:
        if isinstance(value, str) and (folded := slug(value)):
            out.append((folded, role))
    return tuple(dict.fromkeys(out))


_LAB_CTX = re.compile(r"\.(\d+)k$")


def lab_engine(profile_ref: object) -> tuple[str | None, str | None]:
    """`llama.cpp-qwen3.5-9b-q4-k-m-64k@9e4536dfc7ec` → (profile id, engine name `llama.cpp`)."""
    if not isinstance(profile_ref, str) or not profile_ref or profile_ref.startswith("registry@"):
        return None, None  # registry@<id>: a legacy lab recipe, launched as registry recipe <id> (no profile)
    profile = profile_ref.split("@", 1)[0]
    return profile, profile.split("-", 1)[0] or None


def lab_context(stem: str) -> int | None:
    """The lab names a recipe <model>.<profile>.<ctx // 1024>k: the context it was proven at, to 1,024 tokens."""
    m = _LAB_CTX.search(stem)
    return int(m.group(1)) * 1024 if m else None


def index_fields(loaded: LoadedRecord) -> IndexFields:
    r, kind, rid = loaded.record, loaded.kind, loaded.id
    if kind == "speed_sweep":
        rows = [x for x in r.get("rows") or [] if isinstance(x, dict)]
        ctx = [c for c in (_int(x.get("context_tokens")) for x in rows) if c is not None]
        conc = [c for c in (_int(x.get("concurrency")) for x in rows) if c is not None]
        return IndexFields(str(r["recipe_id"]), None, None, None, max(ctx, default=None), max(conc, default=None))
    if kind == "recipe":
        serving: dict[str, Any] = r["serving"] if isinstance(r.get("serving"), dict) else {}
        engine: dict[str, Any] = r["engine"] if isinstance(r.get("engine"), dict) else {}
        rel = _obj(loaded.api_fields.get("relationships"))
        model = _obj(rel.get("model"))
        inst = _obj(rel.get("model_instance"))
        hf = _obj(loaded.api_fields.get("huggingface"))
        model_id = _str(model.get("id"))
        return IndexFields(rid, _str(r.get("model_instance_id")), _str(r.get("hardware_id")), _str(engine.get("name")),
                           _int(serving.get("max_context_tokens")), _int(serving.get("max_concurrency")),
                           slug(model_id) if model_id else None,
                           _names([(r.get("model_instance_id"), "instance"), (model_id, "model_id"),
                                   (model.get("name"), "alias"), (inst.get("id"), "instance"),
                                   (inst.get("name"), "alias"), (hf.get("repository"), "alias")]))
    if kind == "lab_recipe":
        _, engine_name = lab_engine(r.get("engine"))
        weights = str(r.get("weights") or "").split("@", 1)[0]
        model_id = slug(str(r.get("model") or "")) or None
        return IndexFields(rid, weights or None, _str(r.get("card")), engine_name, lab_context(loaded.path.stem), 1,
                           model_id, _names([(r.get("model"), "model_id"), (weights, "alias")]))
    if kind == "lab_run":
        recipe = _obj(r.get("recipe"))
        card = str(recipe.get("card") or "")
        stem = loaded.path.stem
        slug_part = stem[len(card) + 1:] if card and stem.startswith(card + ".") else stem
        of = f"{card}/{slug_part.rsplit('.', 1)[0]}" if "." in slug_part else rid
        _, engine_name = lab_engine(recipe.get("engine"))
        return IndexFields(of, None, card or None, engine_name, lab_context(slug_part.rsplit(".", 1)[0]), 1,
                           slug(str(recipe.get("model") or "")) or None, _names([(recipe.get("model"), "model_id")]))
    if kind == "model_instance":
        hf = _obj(r.get("huggingface"))
        return IndexFields(rid, rid, None, None, None, None, slug(str(r.get("model_id") or "")) or None,
                           _names([(r.get("model_id"), "model_id"), (rid, "instance"), (r.get("repository"), "alias"),
                                   (r.get("served_name"), "alias"), (hf.get("repository"), "alias")]))
    if kind == "model":
        hf = _obj(r.get("huggingface"))
        return IndexFields(rid, None, None, None, None, None, slug(rid),
                           _names([(rid, "model_id"), (r.get("name"), "alias"), (hf.get("repository"), "alias")]))
    if kind == "hardware":
        return IndexFields(rid, None, rid, None, None, None)
    if kind == "engine_profile":
        return IndexFields(rid, None, None, _str(r.get("engine")), _int(r.get("ctx")), _int(r.get("seqs")))
    return IndexFields(rid, None, None, None, None, None)


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

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "version": self.version, "versions": self.versions,
                "recipe_id": self.fields.recipe_id, "model_instance_id": self.fields.model_instance_id,
                "hardware_id": self.fields.hardware_id, "engine": self.fields.engine,
                "context_tokens": self.fields.context_tokens, "concurrency": self.fields.concurrency,
                "model_id": self.fields.model_id, "normalised": list(self.loaded.normalised),
                "sources": [{"source": s.source, "sha256": s.sha256, "imported_at": s.imported_at,
                             "envelope": s.envelope} for s in self.sources],
                "redacted": list(self.redacted)}


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


@dataclass(frozen=True)
class Stored:
    """What one import did to the database."""

    outcome: StoreOutcome
    record_id: str
    kind: RecordKind
    version: int
    earlier_source: str | None = None
    redacted: tuple[str, ...] = ()  # where the record held a secret, replaced by <redacted> before it was stored


def without_secrets(raw: bytes, loaded: LoadedRecord) -> tuple[bytes, LoadedRecord, tuple[str, ...]]:
    """`raw` (read as `loaded`) with every secret redacted (see the module docstring), read again when that changed
    it, and where the secrets were."""
    clean, places = redact_record_bytes(raw)
    if clean == raw:
        return raw, loaded, places
    again = parse_record(clean, loaded.path, loaded.kind, check=False)
    return clean, replace(again, normalised=loaded.normalised, related=loaded.related), places


class RegistryDB:
    """An open registry database. Use `RegistryDB.open(path)`; close it (or use it as a context manager)."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn

    def __enter__(self) -> RegistryDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
            _create_file(path)
        before = _lstat(path)
        try:
            conn = sqlite3.connect(f"file:{quote(str(path))}?mode=rw", isolation_level=None, timeout=30.0, uri=True)
        except sqlite3.Error as exc:
            raise UsageError(f"{path}: cannot open the registry database ({exc}); give --db PATH") from None
        db = cls(path, conn)
        try:
            _same_file_still(path, before)
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

    def meta(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT key, value FROM meta").fetchall())

    # Writing

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
        """Keep `raw` (already parsed and validated as `loaded`) in one transaction; see the module docstring."""
        raw, loaded, redacted = without_secrets(raw, loaded)
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
                        (pk, i, _int(x.get("context_tokens")), _int(x.get("concurrency")),
                         _int(x.get("output_tokens")), _num(x.get("decode_tok_s")),
                         _num(x.get("decode_tok_s_per_stream")), _num(x.get("prefill_tok_s")),
                         _num(x.get("ttft_ms_p50")), x.get("status") if isinstance(x.get("status"), str) else None)
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
        the newest engine profile held (`records.lab_launch`), as every read takes them: the recipe at `recipe_pk`
        (just imported), or every version of every recipe that names `profile_id` (just imported). A recipe whose
        profile is not held keeps the <n>k of its file name (and concurrency 1); one whose launch cannot be rendered
        has neither (NULL: unknown)."""
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

    # Reading

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

    def recipes(self, *, model: str | None = None, hardware_id: str | None = None, engine: str | None = None,
                min_context: int | None = None) -> list[StoredRecord]:
        """Newest recipes (the registry's and the lab's), filtered in SQL on the indexed fields; `model` matches
        as `model_match` says (model id, then aliases, exactly)."""
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
        rows = self.conn.execute(f"SELECT {self._COLUMNS} FROM records r WHERE {' AND '.join(clauses)} ORDER BY id",
                                 args).fetchall()
        found = [self._stored(r) for r in rows]
        if min_context is None:
            return found
        return [r for r in found if r.fields.context_tokens is not None and r.fields.context_tokens >= min_context]

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
        # a lab recipe's engine profile: beside the file, in the checkout that holds it (records.lab_beside)
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
