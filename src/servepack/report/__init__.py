"""servepack.report: views rendered from the evidence view model (records.evidence), starting with the HTML page."""

from servepack.report.page import render_report, write_report, write_run_report

__all__ = ["render_report", "write_report", "write_run_report"]
