"""The program BFCL multi-turn runs in the sandbox: calls executed against the bfcl-eval wheel's own backend classes.

It imports nothing of servepack and only the standard library besides the backend modules, which the host streams
into the sandbox's workspace under `pkg/` (see smoke.bfcl.multi_turn). It reads `request.json` beside it:

    {"modules": {class: module}, "classes": [...], "stateless": [...], "initial_config": {...},
     "long_context": bool, "model": [turn: [step: [call]]], "ground_truth": [turn: [call]] | null}

where a call is `{"name": str, "args": [...], "kwargs": {...}}`, and writes `response.json`:
`{"turns": [{"model": [step: [result]], "ground_truth": [result], "state_diffs": [...]}]}` (the last two only
with a ground truth). The rules are upstream's (bfcl-eval's multi-turn execution): one instance per involved class,
loaded from a deep copy of its initial config (stateless classes are not loaded), kept for the whole conversation;
a call runs the public method of that name (when classes share one, the last class's); a result that is a str is
kept, a dict is JSON (its str where JSON fails), anything else its str; a failure is
`Error during execution: <message>`. The model's instances and the ground truth's are apart; after each turn every
public attribute of each ground-truth instance is compared (`!=`) with the model instance's.

Calls are made directly, not built into source text and `eval`ed as upstream does, so two of upstream's accidents
are not reproduced (neither touches a ground-truth call of the pinned data): a name that is no public method is
always `name '…' is not defined` (upstream would evaluate it in its own module, where builtins answer), and a string
argument holding `method(` is passed as it is (upstream's rewriting of method names reaches inside strings).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any

# Method names upstream refuses to run, whatever class offers them.
BLOCKED = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})
_MISSING = object()
_DEPTH = 6


def instances(req: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name in req["classes"]:
        cls = getattr(importlib.import_module(req["modules"][name]), name)
        obj = cls()
        if name not in req["stateless"]:
            obj._load_scenario(copy.deepcopy(req["initial_config"].get(name, {})), long_context=req["long_context"])
        out[name] = obj
    return out


def methods(objs: dict[str, Any]) -> dict[str, Any]:
    table = {}
    for obj in objs.values():
        for name, method in inspect.getmembers(obj, predicate=inspect.ismethod):
            if not name.startswith("_"):
                table[name] = method
    return table


def as_text(value: Any) -> str:
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except Exception:
            return str(value)
    return str(value)


def call(table: dict[str, Any], c: dict[str, Any]) -> str:
    name = c["name"]
    try:
        if name in BLOCKED:
            raise Exception(f"Function call {name} is not allowed.")
        if name not in table:
            raise NameError(f"name {name!r} is not defined")
        return as_text(table[name](*c.get("args", []), **c.get("kwargs", {})))
    except Exception as exc:
        return f"Error during execution: {exc}"


def plain(value: Any, depth: int = 0) -> Any:
    """A JSON form of a state value, for the report only (the comparison uses the objects themselves)."""
    if value is _MISSING:
        return "<missing>"
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if depth >= _DEPTH:
        return repr(value)[:200]
    if isinstance(value, dict):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v, depth + 1) for v in value]
    if hasattr(value, "__dict__"):
        public = {k: plain(v, depth + 1) for k, v in vars(value).items() if not k.startswith("_")}
        return {"__class__": type(value).__name__, **public}
    return repr(value)[:200]


def diffs(model: dict[str, Any], truth: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for cls, gt in truth.items():
        mine = model[cls]
        for attr, expected in vars(gt).items():
            if attr.startswith("_"):
                continue
            got = getattr(mine, attr, _MISSING)
            if got is _MISSING or got != expected:
                out.append({"class": cls, "attribute": attr, "model": plain(got), "ground_truth": plain(expected)})
    return out


def main() -> None:
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here / "pkg"))
    req = json.loads((here / "request.json").read_text(encoding="utf-8"))
    model = instances(req)
    table = methods(model)
    truth_calls = req.get("ground_truth")
    truth = instances(req) if truth_calls is not None else {}
    truth_table = methods(truth)
    turns = []
    for t, steps in enumerate(req["model"]):
        turn: dict[str, Any] = {"model": [[call(table, c) for c in step] for step in steps]}
        if truth_calls is not None:
            turn["ground_truth"] = [call(truth_table, c) for c in truth_calls[t]]
            turn["state_diffs"] = diffs(model, truth)
        turns.append(turn)
    (here / "response.json").write_text(json.dumps({"turns": turns}), encoding="utf-8")


if __name__ == "__main__":
    main()
