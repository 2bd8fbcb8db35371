"""A run exported as local-ai-registry/v1 records (recipe, speed sweep, and every record a submission needs).

`export` (the recipe and every record a submission needs), with `fields` (shared field forms), `hardware` (the
catalog id or a hardware record), `model` (model and model-instance records the catalog lacks), `sweep` (speed-sweep
rows and record) and `lab_run` (a CPU box's run in the lab format); `write` (the export schema, the `--out` checks,
the checked write). Reading a record is `registry.format`'s. This package's public API is listed here.
"""

from __future__ import annotations

from servepack.registry.export.export import (
    NEVER_VALIDATED,
    TOOLS_MIN_STRICT,
    UNKNOWN_CAPABILITY,
    Export,
    build_export,
    build_records,
)
from servepack.registry.export.fields import GIB, fact, slug, zulu
from servepack.registry.export.hardware import HardwareChoice, catalog_gpu_id, registry_hardware
from servepack.registry.export.lab_run import LAB_GATES, LAB_MIN_TPS, OWN_FOLDER
from servepack.registry.export.sweep import sweep_row
from servepack.registry.export.write import (
    ExportKind,
    ExportResult,
    check_export_dir,
    export_records,
    export_run,
    schema,
    validate,
)

__all__ = [
    "GIB",
    "LAB_GATES",
    "LAB_MIN_TPS",
    "NEVER_VALIDATED",
    "OWN_FOLDER",
    "TOOLS_MIN_STRICT",
    "UNKNOWN_CAPABILITY",
    "Export",
    "ExportKind",
    "ExportResult",
    "HardwareChoice",
    "build_export",
    "build_records",
    "catalog_gpu_id",
    "check_export_dir",
    "export_records",
    "export_run",
    "fact",
    "registry_hardware",
    "schema",
    "slug",
    "sweep_row",
    "validate",
    "zulu",
]
