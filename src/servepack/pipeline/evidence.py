"""The evidence every job leaves in its results directory: MEASURED.md and report.html, derived from the receipts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from servepack.errors import ServepackError
from servepack.packs.schema import Pack
from servepack.records.measured import write_measured
from servepack.records.receipt import RECEIPT_NAME
from servepack.report import write_run_report


def write_evidence(results_dir: Path, pack: Pack) -> tuple[Path, Path]:
    """MEASURED.md and report.html for a results directory with a receipt (this run and its pack's history)."""
    return write_measured(results_dir, pack), write_run_report(results_dir)


def evidence_after(results_dir: Path, pack: Pack, progress: Callable[[str], None]) -> None:
    """Write the evidence of a run that ended early too; a failure to render is said, never raised over the
    run's own error (the receipt and raw files are already written)."""
    if not (results_dir / RECEIPT_NAME).is_file():
        return
    try:
        measured, page = write_evidence(results_dir, pack)
    except (ServepackError, OSError, ValueError) as exc:
        progress(f"evidence not rendered ({type(exc).__name__}: {exc}); `servepack report {results_dir}` retries")
        return
    progress(f"evidence: {measured.name}, {page.name} in {results_dir}")
