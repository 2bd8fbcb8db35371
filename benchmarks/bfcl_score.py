"""Scoring a full single-turn BFCL run offline: every entry of all thirteen categories of the installed bfcl-eval
data, answered non-streamed and streamed, recorded as `smoke run --full` records it, then scored again from the
folder as `servepack smoke score RESULTS_DIR` does (read, every attempt judged, stream comparison, tally) and
shaped as the leaderboard reports it. The target: the scoring in 10 s or less on 2 cores.

The recorded answers are built from BFCL's possible answers (the first accepted value of every parameter) and,
for every third entry, a wrong one (a value changed), so both verdicts are exercised; irrelevance entries answer
in words, relevance ones with a call. The recording itself (writing the folder) is not timed.

    PYTHONPATH=src .venv/bin/python benchmarks/bfcl_score.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from servepack.smoke.bfcl.data import CATEGORIES, BfclEntry, kind, load_category, openai_name
from servepack.smoke.bfcl.leaderboard import leaderboard
from servepack.smoke.bfcl.runner import run_entry
from servepack.smoke.client import ChatExchange
from servepack.smoke.rescore import read_suite_results, rescore_folder
from servepack.smoke.result import run_cases
from servepack.store import ResultsDir


def _answer(entry: BfclEntry, wrong: bool) -> dict[str, Any]:
    if kind(entry.category) == "irrelevance":
        return {"role": "assistant", "content": "None of the functions offered can do that."}
    answers = entry.ground_truth or [{entry.functions[0]["name"]: {}}]
    calls = []
    for i, answer in enumerate(answers):
        name, params = next(iter(answer.items()))
        args = {k: v[0] for k, v in params.items() if v and v[0] != ""}
        if wrong and args:
            key = next(iter(args))
            args[key] = f"{args[key]} (not this)"
        calls.append({"id": f"c{i}", "type": "function",
                      "function": {"name": openai_name(name), "arguments": json.dumps(args)}})
    return {"role": "assistant", "content": None, "tool_calls": calls}


class RecordedAnswers:
    """Answers each request from a table, as a server would have (the `send` the runner calls)."""

    def __init__(self, entries: list[BfclEntry]) -> None:
        self.by_question = {json.dumps(e.messages): _answer(e, i % 3 == 2) for i, e in enumerate(entries)}

    def send(self, request: dict[str, Any], mode: str) -> ChatExchange:
        message = self.by_question[json.dumps(request["messages"])]
        body = {"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        return ChatExchange(mode, request, body, 0.0)


def record(folder: Path) -> int:
    entries = [e for c in CATEGORIES for e in load_category(c)]
    client = RecordedAnswers(entries)
    results = ResultsDir(folder)
    run_cases("bfcl-all", entries,
              lambda e: run_entry(client, e, "m", temperature=0.0, max_tokens=512, repeat=1,  # type: ignore[arg-type]
                                  modes=("nonstream", "stream")),
              results, None, suite_version="bfcl-eval (benchmark)", executed=False, base_url="http://127.0.0.1:1",
              model="m", temperature=0.0, repeat=1, runner_hash="0" * 64, scorer_version="bfcl-ast")
    return len(entries)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3, help="timed scorings (the best and the median are shown)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "run"
        n = record(folder)
        size = (folder / "bfcl-all.json").stat().st_size
        print(f"{n} entries × 2 modes recorded ({size / 1e6:.1f} MB); {os.cpu_count()} cores")
        totals = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            read_suite_results(folder)
            t1 = time.perf_counter()
            (again,) = rescore_folder(folder)
            t2 = time.perf_counter()
            assert again.rescored is not None and again.changed == [], "rescoring moved a verdict"
            board = leaderboard(again.rescored)
            t3 = time.perf_counter()
            totals.append(t3 - t1)
            print(f"reading alone {t1 - t0:.2f} s · rescore_folder (read, judge, tally) {t2 - t1:.2f} s · "
                  f"leaderboard {t3 - t2:.2f} s · scoring {t3 - t1:.2f} s")
        totals.sort()
        print(f"passed {board.passed}/{n} (first non-streamed answers); scoring a full run (rescore_folder + "
              f"leaderboard): best {totals[0]:.2f} s, median {totals[len(totals) // 2]:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
