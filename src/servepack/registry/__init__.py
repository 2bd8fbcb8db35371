"""The local registry: local-ai-registry/v1 records kept verbatim in one SQLite file, queried and ranked here."""

from servepack.registry.db import RegistryDB, StoredRecord, default_db_path, lookup, resolve, resolve_record

__all__ = ["RegistryDB", "StoredRecord", "default_db_path", "lookup", "resolve", "resolve_record"]
