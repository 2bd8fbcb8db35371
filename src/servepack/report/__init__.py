"""servepack.report: views rendered from the evidence view model (records.evidence), starting with the HTML page.

Modules:

- `bfcl`: The smoke section's BFCL part: a BFCL suite result as the leaderboard scores it (see
  smoke.bfcl.leaderboard).
- `capacity`: The two capacity charts, from plain numbers: throughput against latency (with the SLO line) and
  goodput against load.
- `context`: What every section of the page shares: the group in focus (`Ctx`) and how figures are written.
- `markup`: HTML building blocks: every string from a record passes through `esc` before it reaches the page.
- `measured`: MEASURED.md: rendered from the receipts of a pack's results history, never written by hand.
- `measured_bfcl`: MEASURED.md's BFCL part: each BFCL suite of the history (its tip run) as the leaderboard scores
  it.
- `measured_capacity`: The capacity and energy parts of MEASURED.md, and the words both views use for them (the page
  reuses these).
- `page`: The HTML report: one self-contained page rendered from the evidence view model, never from anything else.
- `plots`: Static SVG charts (matplotlib, Agg): inlined in the page, no script, text kept as text.
- `sources`: What `servepack report DIR…` reads: each DIR as a run or as a pack's results folder, into evidence.
- `style`: The page's inline stylesheet and its Content-Security-Policy (no script, no fetch).
- `sections/`: The sections of the HTML report, one module each: `section(ctx) -> html`.
"""

from servepack.report.page import render_report, write_report, write_run_report

__all__ = ["render_report", "write_report", "write_run_report"]
