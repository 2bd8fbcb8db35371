"""The smoke section's BFCL part: a BFCL suite result as the leaderboard scores it (see smoke.bfcl.leaderboard)."""

from __future__ import annotations

from servepack.report.markup import table
from servepack.smoke.bfcl.leaderboard import COLUMNS, is_bfcl_result, leaderboard, rows
from servepack.smoke.result import SuiteResult


def bfcl_table(result: SuiteResult) -> str:
    """Per-category accuracy with n and a 95% interval, then the leaderboard's aggregates ('' for other suites)."""
    if not is_bfcl_result(result):
        return ""
    board = leaderboard(result)
    sample = "a fixed sample per category; --full runs every entry" if board.sampled else "every entry"
    return table(COLUMNS, rows(board), numeric=(1,),
                 caption=f"as the BFCL leaderboard scores it: first non-streamed answer per entry, {sample}; "
                         "streamed answers apart")
