"""BFCL's multi-turn verdict, by upstream's rules (bfcl-eval's multi-turn checker), on a recorded conversation.

A conversation is recorded turn by turn, each turn a list of steps, each step the assistant message of one round.
Decoding a step is upstream's for function-calling models: the message's native `tool_calls`, each
`{name: json.loads(arguments)}`; a step with no tool calls, or any call whose arguments are not a JSON object,
decodes to nothing and ends its turn (the driver) and is left out (the checker). Then, in order:

1. fewer recorded turns than the entry has (the model was cut off after MAX_STEPS rounds in a turn before the
   last): BFCL_MT_FORCE_TERMINATED;
2. the model's decoded calls and the ground truth's run in one sandboxed process (multi_turn.execute), turn by
   turn, each side on its own instances;
3. per turn: the model's results so far (this turn's and every earlier turn's) are pooled; a turn whose ground
   truth has calls but where the model made none is BFCL_MT_EMPTY_TURN; a turn whose ground truth is empty (the
   missing function or parameter turns) is not checked (calls made there still ran, so later states see them);
   otherwise every public attribute of every class must equal the ground truth's (BFCL_MT_STATE), and every result
   of the ground truth's calls of this turn must be among the pooled results, counted with repeats, in any order
   (BFCL_MT_RESPONSE).

The first failure is the verdict. A sandboxed run that fails is BFCL_MT_BACKEND.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from servepack.smoke.bfcl.multi_turn import BackendError, Call, MultiTurnEntry, execute
from servepack.smoke.codes import finding
from servepack.smoke.result import Verdict

MT_CHECKER_VERSION = "1.0"
Problem = tuple[str, str]
Executor = Callable[[MultiTurnEntry, list[list[list[Call]]], list[list[Call]] | None], list[dict[str, Any]]]


def decode_step(message: dict[str, Any]) -> list[Call] | None:
    """The calls of one assistant message as upstream decodes them for execution; None when it decodes to none."""
    raw = message.get("tool_calls")
    if not isinstance(raw, list) or not raw:
        return None
    calls = []
    for c in raw:
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict):
            return None
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                return None
        if not isinstance(args, dict):
            return None
        calls.append({"name": str(fn.get("name")), "args": [], "kwargs": args})
    return calls


def step_message(step: dict[str, Any]) -> dict[str, Any]:
    message = step.get("message") if isinstance(step, dict) else None
    return message if isinstance(message, dict) else {}


def decoded_turns(turns: list[list[dict[str, Any]]]) -> list[list[list[Call]]]:
    """Per turn, the steps that decode to calls (the others left out, as upstream's checker leaves them)."""
    return [[calls for step in turn if (calls := decode_step(step_message(step)))] for turn in turns]


def check(entry: MultiTurnEntry, turns: list[list[dict[str, Any]]], run: Executor = execute) -> Problem | None:
    """None when the recorded turns pass the entry; else the first problem (see the module doc)."""
    if len(turns) != len(entry.ground_truth):
        return ("BFCL_MT_FORCE_TERMINATED", f"the conversation stopped after {len(turns)} of "
                f"{len(entry.ground_truth)} turns: still calling tools after the step limit")
    model = decoded_turns(turns)
    try:
        results = run(entry, model, entry.ground_truth_calls())
    except BackendError as exc:
        return "BFCL_MT_BACKEND", str(exc)
    pooled: list[str] = []
    for t, (steps, expected, res) in enumerate(zip(model, entry.ground_truth, results, strict=True)):
        pooled += [r for step in res["model"] for r in step]
        if not expected:
            continue
        if not steps:
            return "BFCL_MT_EMPTY_TURN", f"turn {t}: no call made; expected {', '.join(expected)}"
        if res["state_diffs"]:
            d = res["state_diffs"][0]
            shown = json.dumps({"model": d["model"], "expected": d["ground_truth"]}, default=str)
            return ("BFCL_MT_STATE", f"turn {t}: {d['class']}.{d['attribute']} differs from the ground truth's "
                    f"({len(res['state_diffs'])} attribute(s)): {shown}"[:500])
        wanted: list[str] = res["ground_truth"]
        missing = Counter(wanted) - Counter(pooled)
        if missing:
            first = next(iter(missing))
            return ("BFCL_MT_RESPONSE", f"turn {t}: {sum(missing.values())} ground-truth result(s) missing from the "
                    f"model's results so far, e.g. {first[:200]!r}")
    return None


def score_turns(entry: MultiTurnEntry, turns: list[list[dict[str, Any]]], run: Executor = execute) -> Verdict:
    """The verdict of a recorded conversation (strict and lenient alike: BFCL reads no call leniently)."""
    problem = check(entry, turns, run)
    if problem is None:
        return Verdict(strict_pass=True, lenient_pass=True)
    return Verdict(strict_pass=False, lenient_pass=False, findings=[finding(*problem)])
