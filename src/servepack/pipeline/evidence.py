"""The evidence every job leaves in its results directory: MEASURED.md and report.html, derived from the receipts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from servepack.errors import ResultsWriteError, ServepackError
from servepack.packs.schema import Pack
from servepack.records.receipt import RECEIPT_NAME
from servepack.records.verify import MEASURED_NAME, REPORT_NAME
from servepack.report import write_run_report
from servepack.report.measured import write_measured
from servepack.store import write_problem


def write_evidence(results_dir: Path, pack: Pack) -> tuple[Path, Path]:
    """MEASURED.md and report.html for a results directory with a receipt (this run and its pack's history).
    A page the disk cannot take (full, read-only) is a ResultsWriteError (exit 1) whose one line names the fix;
    no half-written page is left, and the run's receipt and results are untouched."""
    try:
        return write_measured(results_dir, pack), write_run_report(results_dir)
    except OSError as exc:  # each page is written by safepath.Replacing: a failed one leaves no temp file
        err = ResultsWriteError(
            f"cannot write {MEASURED_NAME} and {REPORT_NAME} in {results_dir} ({write_problem(exc)}); the run, its "
            f"receipt and results are kept: make room, then `servepack report {results_dir}` writes {REPORT_NAME} "
            f"(the pack's next run shows this one in its {MEASURED_NAME})")
        err.reason = write_problem(exc)
        raise err from None


def evidence_after(results_dir: Path, pack: Pack, progress: Callable[[str], None], *,
                   write_errors: bool = False) -> None:
    """Write the evidence of a run that ended early too; a failure to render is said, never raised over the
    run's own error (the receipt and raw files are already written). With `write_errors` (the run itself ended
    well), a page that could not be written (disk full, read-only) is the command's error: ResultsWriteError,
    exit 1, one line naming the fix; what was written before is kept and no half-written page is left."""
    if not (results_dir / RECEIPT_NAME).is_file():
        return
    try:
        measured, page = write_evidence(results_dir, pack)
    except ResultsWriteError as exc:
        if write_errors:
            raise
        progress(str(exc))
        return
    except (ServepackError, ValueError) as exc:
        progress(f"evidence not rendered ({type(exc).__name__}: {exc}); `servepack report {results_dir}` retries")
        return
    progress(f"evidence: {measured.name}, {page.name} in {results_dir}")
