"""MEASURED.md's BFCL part: each BFCL suite of the history (its tip run) as the leaderboard scores it."""

from __future__ import annotations

from servepack.records.evidence import Evidence
from servepack.smoke.bfcl.leaderboard import COLUMNS, is_bfcl_result, leaderboard, rows


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
