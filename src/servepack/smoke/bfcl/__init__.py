"""The Berkeley Function Calling Leaderboard's single-turn categories, from the `bfcl-eval` wheel's own data,
sent through the smoke client and judged by BFCL's AST rules (`checker`), so a pack's figures can be set
beside the published leaderboard. `data` reads and converts the test files; `runner` runs them; `langs` holds the
Java and JavaScript type rules; `leaderboard` computes per-category accuracy and the leaderboard's aggregates.
Multi-turn: `multi_turn` reads its entries and runs calls in the sandbox through `mt_backend` (the program run
there, against the wheel's own backend classes); `multi_turn_drive` holds the conversation with the server;
`multi_turn_check` judges it by state and response.
"""

from servepack.smoke.bfcl.runner import (
    full_suite,
    lookup_entry,
    parse_suite,
    run_bfcl_suite,
    score_entry,
    score_recorded_entry,
)

__all__ = ["full_suite", "lookup_entry", "parse_suite", "run_bfcl_suite", "score_entry", "score_recorded_entry"]
