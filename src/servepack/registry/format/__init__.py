"""The local-ai-registry's record format, read and checked: the lower rank of `registry` (records, bench, pipeline
and the rest of `registry` import it; it imports no higher layer).

`record` (the kinds, `LoadedRecord`, parse and load, checked by the registry's own rules), `notes` (samples stated in
notes, read and written), `launch` (a record's launch steps, a lab recipe's engine and rendered launch), `show` (what
`registry show` prints), `check` (the one reader of record JSON and the registry's published rules applied to a
folder), `lab_launch` (a lab recipe's launch rendered from its engine profile as the registry's lab renders it),
`lab_beside` (a lab recipe file's engine profile found beside it in the user's checkout), `lemonade` (a lemonade
profile's llama-server args and context, read from its flags, options file or config); `schemas/` the registry's
JSON Schemas vendored unchanged (`upstream/`) and servepack's stricter export schemas. The names below are this
package's public API; `check`, `lab_launch`, `lab_beside` and `lemonade` are imported by module.
"""

from __future__ import annotations

from servepack.registry.format.launch import (
    LAB_PROFILE_FIX,
    lab_engine_name,
    lab_launch_of,
    lab_legacy_recipe,
    launch_steps,
)
from servepack.registry.format.notes import NOTES_FORM, SampleSet, numbers, parse_notes, sample_sentence
from servepack.registry.format.record import (
    API_ONLY_FIELDS,
    LAB_KINDS,
    LAB_RECIPE_KEYS,
    RECIPE_KINDS,
    RECORD_KINDS,
    LoadedRecord,
    RecordKind,
    RecordRefused,
    lab_record_id,
    load_record,
    normalise_times,
    parse_record,
    parse_time,
    read_record_bytes,
    record_kind,
)
from servepack.registry.format.show import summary

__all__ = [
    "API_ONLY_FIELDS",
    "LAB_KINDS",
    "LAB_PROFILE_FIX",
    "LAB_RECIPE_KEYS",
    "NOTES_FORM",
    "RECIPE_KINDS",
    "RECORD_KINDS",
    "LoadedRecord",
    "RecordKind",
    "RecordRefused",
    "SampleSet",
    "lab_engine_name",
    "lab_launch_of",
    "lab_legacy_recipe",
    "lab_record_id",
    "launch_steps",
    "load_record",
    "normalise_times",
    "numbers",
    "parse_notes",
    "parse_record",
    "parse_time",
    "read_record_bytes",
    "record_kind",
    "sample_sentence",
    "summary",
]
