"""local-ai-registry/v1 records, both ways: export a run as recipe + speed sweep, read a stored record.

Reading: `record` (the kinds, `LoadedRecord`, parse and load, checked by the registry's own rules), `notes` (samples
stated in notes, read and written), `launch` (a record's launch steps, a lab recipe's engine and rendered launch),
`show` (what `registry show` prints). Export: `export` (the recipe and every record a submission needs), with
`fields` (shared field forms), `hardware`, `model`, `sweep` and `lab_run` (a CPU box's run in the lab format);
`write` (the export schema, the `--out` checks, the checked write). This package's public API is listed here.
"""

from __future__ import annotations

from servepack.records.registry.export import (
    NEVER_VALIDATED,
    TOOLS_MIN_STRICT,
    UNKNOWN_CAPABILITY,
    Export,
    build_export,
    build_records,
)
from servepack.records.registry.fields import GIB, fact, slug, zulu
from servepack.records.registry.hardware import HardwareChoice, catalog_gpu_id, registry_hardware
from servepack.records.registry.lab_run import LAB_GATES, LAB_MIN_TPS, OWN_FOLDER
from servepack.records.registry.launch import (
    LAB_PROFILE_FIX,
    lab_engine_name,
    lab_launch_of,
    lab_legacy_recipe,
    launch_steps,
)
from servepack.records.registry.notes import NOTES_FORM, SampleSet, numbers, parse_notes, sample_sentence
from servepack.records.registry.record import (
    API_ONLY_FIELDS,
    LAB_KINDS,
    LAB_RECIPE_KEYS,
    RECIPE_KINDS,
    RECORD_KINDS,
    LoadedRecord,
    RecordKind,
    lab_record_id,
    load_record,
    normalise_times,
    parse_record,
    parse_time,
    read_record_bytes,
    record_kind,
)
from servepack.records.registry.show import summary
from servepack.records.registry.sweep import sweep_row
from servepack.records.registry.write import (
    ExportKind,
    ExportResult,
    check_export_dir,
    export_records,
    export_run,
    schema,
    validate,
)

__all__ = [
    "API_ONLY_FIELDS",
    "GIB",
    "LAB_GATES",
    "LAB_KINDS",
    "LAB_MIN_TPS",
    "LAB_PROFILE_FIX",
    "LAB_RECIPE_KEYS",
    "NEVER_VALIDATED",
    "NOTES_FORM",
    "OWN_FOLDER",
    "RECIPE_KINDS",
    "RECORD_KINDS",
    "TOOLS_MIN_STRICT",
    "UNKNOWN_CAPABILITY",
    "Export",
    "ExportKind",
    "ExportResult",
    "HardwareChoice",
    "LoadedRecord",
    "RecordKind",
    "SampleSet",
    "build_export",
    "build_records",
    "catalog_gpu_id",
    "check_export_dir",
    "export_records",
    "export_run",
    "fact",
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
    "registry_hardware",
    "sample_sentence",
    "schema",
    "slug",
    "summary",
    "sweep_row",
    "validate",
    "zulu",
]
