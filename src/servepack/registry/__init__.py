"""The local registry: local-ai-registry/v1 records read, checked, kept verbatim in one SQLite file, queried, ranked
and exported.

Two ranks (ARCHITECTURE.md): `format/` (the registry's record format, its published rules and the lab's launch
render; records, bench and pipeline import it) below everything else here: `export/` (a run as registry records),
`db`, `dbfile`, `index`, `queries`, `storing` (the database), `ingest` (`registry import`), `choose`, `checks`,
`host_facts`, `recipe_facts`, `cards` (`registry choose`: which of the registry's hardware cards this host is). The
database's names below are loaded when first used, so that importing `registry.format` loads nothing of the rank
above it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servepack.registry.db import RegistryDB, StoredRecord, default_db_path, lookup, resolve, resolve_record

__all__ = ["RegistryDB", "StoredRecord", "default_db_path", "lookup", "resolve", "resolve_record"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("servepack.registry.db"), name)
    raise AttributeError(f"module 'servepack.registry' has no attribute {name!r}")
