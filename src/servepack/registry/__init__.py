"""The local registry: local-ai-registry/v1 records kept verbatim in one SQLite file, queried and ranked here.

Modules:

- `checks`: Whether a recipe is runnable here (`registry choose`): five checks, each ok / not ok / unknown with the
  reason in words.
- `choose`: `servepack registry choose MODEL`: the recipes for a model, ranked by measured decode, each judged
  runnable here.
- `db`: The registry database: one SQLite file holding every imported record verbatim, with provenance and an index.
- `dbfile`: Where the registry database file is, and whether it may be opened there: never through a link (the file
  or the journal names SQLite opens beside it), never a file that is not regular, never in a folder others may swap
  it in; a read command never makes one (`check_db_path`).
- `host_facts`: This host as `registry choose` sees it: its detected hardware id, memory and caches (`HostFacts`,
  `this_host`), and whether servepack can launch an engine here (`probe_engine`: its catalog entry, its binary, what
  it says it is).
- `index`: What a record is found by: the fields indexed for each record kind (`IndexFields`, `index_fields`), the
  one folding of names (`slug`), and the engine and context a lab recipe's names say (`lab_engine`, `lab_context`).
- `ingest`: `servepack registry import`: files and folders of records into the registry database, one by one.
- `queries`: Reading the registry database back: a record as held (`StoredRecord`: read again from its verbatim
  bytes, its provenance, redacted again on every read), a sweep's rows (`SweepRow`), and the queries of
  `RegistryReads` — by id, the newest of each id, a model's names, recipes filtered on the index, sweeps, lab runs,
  counts.
- `recipe_facts`: What a recipe record says, as `registry choose` reads it: its launch arguments and flags, the
  weights it pins (`model_pins`), the context it launches with (`recipe_context`; a lab recipe's as the lab renders
  it) and the largest it measured (`measured_context`), and the engine it names.
- `storing`: Storing one record in the registry database: one transaction per file (`BEGIN IMMEDIATE` … `COMMIT`),
  the same bytes again "already present", the same content in other bytes another source, other content a new
  version, its secrets redacted before anything is written, its index and a sweep's rows written beside it, a lab
  recipe's indexed context kept that of its rendered launch (`RegistryWrites`).
"""

from servepack.registry.db import RegistryDB, StoredRecord, default_db_path, lookup, resolve, resolve_record

__all__ = ["RegistryDB", "StoredRecord", "default_db_path", "lookup", "resolve", "resolve_record"]
