"""MEASURED.md's BFCL part: each BFCL suite of the history (its tip run) as the leaderboard scores it."""

from __future__ import annotations

from servepack.records.evidence import Evidence
from servepack.smoke.bfcl.leaderboard import COLUMNS, is_bfcl_result, leaderboard, rows
from servepack.smoke.result import SuiteResult


def bfcl_counted(result: SuiteResult) -> tuple[int, str] | None:
    """A BFCL suite's pass count as the leaderboard counts it (first non-streamed answers) and the words saying so;
    None for other suites, whose count stays every attempt passing."""
    if not is_bfcl_result(result):
        return None
    return leaderboard(result).passed, " non-streamed answers (BFCL table below)"


def bfcl_lines(ev: Evidence) -> list[str]:
    """A table per BFCL suite: per-category accuracy with n and a 95% interval, the leaderboard's aggregates, and
    the streamed answers apart; [] when the history holds no BFCL suite."""
    out: list[str] = []
    for row in ev.smoke:
        if not is_bfcl_result(row.result):
            continue
        board = leaderboard(row.result)
        sample = ("a fixed sample per category (the entries whose sha256(id) is smallest); the leaderboard uses "
                  "every entry (`smoke run --full`)" if board.sampled else "every entry of each category run")
        out += [f"BFCL `{row.result.suite}` as the leaderboard scores it — each entry's first non-streamed answer, "
                f"{sample}; streamed answers are reported apart, not folded into the pass:", "",
                "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS),
                *["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows(board)], ""]
    return out
