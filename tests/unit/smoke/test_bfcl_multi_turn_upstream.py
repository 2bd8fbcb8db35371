"""BFCL multi-turn on the installed wheel's data and backends, run in the sandbox: the ground truth passes, wrong
answers fail, and the verdicts agree with upstream's own multi-turn checker on answers built from the ground truth."""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from servepack.smoke import sandbox
from servepack.smoke.bfcl.multi_turn import Call, MultiTurnEntry, load_category, select
from servepack.smoke.bfcl.multi_turn_check import check

_counter = itertools.count()


@pytest.fixture(autouse=True)
def _wheel_and_sandbox() -> None:
    if importlib.util.find_spec("bfcl_eval") is None:
        from system_deps import missing

        missing("BFCL's data is not installed", "pip install --no-deps bfcl-eval==2026.3.23, as make does")
    if sandbox.isolation().mode == "none":
        pytest.skip(f"no sandbox on this machine: {sandbox.isolation().reason}")


def kwargs_of(entry: MultiTurnEntry, call: Call) -> dict[str, Any]:
    """A ground-truth call's arguments by name (positional ones named in the doc's parameter order)."""
    docs = entry.functions + [d for held in entry.missed.values() for d in held]
    doc = next(d for d in docs if d["name"] == call["name"])
    return {**dict(zip(doc["parameters"]["properties"], call["args"], strict=False)), **call["kwargs"]}


def named(entry: MultiTurnEntry) -> list[list[tuple[str, dict[str, Any]]]]:
    return [[(c["name"], kwargs_of(entry, c)) for c in turn] for turn in entry.ground_truth_calls()]


def recorded(turns: list[list[tuple[str, dict[str, Any]]]]) -> list[list[dict[str, Any]]]:
    """One step per turn holding that turn's calls (a turn without calls: a text answer), then a closing text."""
    out = []
    for calls in turns:
        steps = []
        if calls:
            tool_calls = [{"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                          for i, (n, a) in enumerate(calls)]
            steps.append({"message": {"role": "assistant", "content": None, "tool_calls": tool_calls}})
        steps.append({"message": {"role": "assistant", "content": "Done."}})
        out.append(steps)
    return out


def upstream_valid(entry: MultiTurnEntry, turns: list[list[tuple[str, dict[str, Any]]]]) -> bool:
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    decoded = [[[f"{n}({','.join(f'{k}={v!r}' for k, v in a.items())})" for n, a in calls]] if calls else []
               for calls in turns]
    test_entry = {"id": entry.id, "initial_config": entry.initial_config, "involved_classes": entry.classes}
    # A fresh model name each time: upstream keeps a conversation's instances in globals under it.
    result = multi_turn_checker(decoded, entry.ground_truth, test_entry, entry.category, f"sp{next(_counter)}")
    return bool(result["valid"])


def variants(entry: MultiTurnEntry) -> dict[str, list[list[tuple[str, dict[str, Any]]]]]:
    """The ground truth, and wrong answers built from it."""
    gt = named(entry)
    out = {"ground truth": gt}
    busy = [t for t, calls in enumerate(gt) if calls]
    last = busy[-1]
    out["last call dropped"] = [c[:-1] if t == last else c for t, c in enumerate(gt)]
    out["a turn left empty"] = [[] if t == busy[0] else c for t, c in enumerate(gt)]
    out["calls twice"] = [c + c for c in gt]
    idle = next((t for t, calls in enumerate(gt[:-1]) if not calls and gt[t + 1]), None)
    if idle is not None:  # miss_func / miss_param: acting in the turn meant for asking (executed, not judged there)
        out["acted early"] = [gt[t + 1] if t == idle else c for t, c in enumerate(gt)]
    for t in busy:
        for i, (name, args) in enumerate(gt[t]):
            key = next((k for k, v in args.items() if isinstance(v, str)), None)
            if key:
                changed = [list(c) for c in gt]
                changed[t][i] = (name, {**args, key: args[key] + "_x"})
                out["a string argument changed"] = changed
                return out
    return out


def test_the_ground_truth_passes_and_wrong_answers_fail_on_the_real_backends() -> None:
    entry = next(e for e in load_category("multi_turn_base") if e.id == "multi_turn_base_0")
    gt = named(entry)
    assert check(entry, recorded(gt)) is None
    wrong_dir = [[("cd", {"folder": "document"}), ("mkdir", {"dir_name": "tmp"}),
                  ("mv", {"source": "final_report.pdf", "destination": "tmp"})], *gt[1:]]
    assert check(entry, recorded(wrong_dir))[0] == "BFCL_MT_STATE"  # type: ignore[index]
    no_grep = [gt[0], [("cd", {"folder": "temp"})], *gt[2:]]
    assert check(entry, recorded(no_grep))[0] == "BFCL_MT_RESPONSE"  # type: ignore[index]
    extra_turn = recorded([*gt, [("ls", {})]])
    assert check(entry, extra_turn)[0] == "BFCL_MT_FORCE_TERMINATED"  # type: ignore[index]
    assert check(entry, recorded(gt[:-1]))[0] == "BFCL_MT_FORCE_TERMINATED"  # type: ignore[index]


def test_entries_with_a_backend_servepack_does_not_carry_are_skipped_with_the_reason() -> None:
    entries, skipped = select(["multi_turn_base"], None)
    assert len(entries) + len(skipped) == 200 and len(skipped) == 25
    assert all("MathAPI" in r and "mpmath" in r for r in skipped.values())
    assert not any("MathAPI" in e.classes for e in entries)


@pytest.mark.parametrize("category,size", [("multi_turn_base", 8), ("multi_turn_miss_func", 2),
                                           ("multi_turn_miss_param", 2), ("multi_turn_long_context", 2)])
def test_verdicts_agree_with_upstreams_multi_turn_checker(category: str, size: int) -> None:
    entries, _ = select([category], size * 2)
    assert len(entries) >= size
    seen = {"pass": 0, "fail": 0}
    for entry in entries[:size]:
        for what, turns in variants(entry).items():
            ours = check(entry, recorded(turns))
            theirs = upstream_valid(entry, turns)
            assert (ours is None) == theirs, (entry.id, what, ours)
            seen["pass" if theirs else "fail"] += 1
            if what == "ground truth":
                assert ours is None, (entry.id, ours)
    assert seen["pass"] >= size and seen["fail"] >= size  # both verdicts were exercised


PROBE = '''
import socket


class Probe:
    def _load_scenario(self, scenario, long_context=False):
        self.scenario = scenario

    def connect(self, port):
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
            return "connected"
        except OSError as exc:
            return "refused: " + type(exc).__name__

    def read(self, path):
        try:
            with open(path) as f:
                return f.read()
        except OSError as exc:
            return "unreadable: " + type(exc).__name__
'''


def test_backend_code_runs_without_network_or_host_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a backend module does runs in the sandbox: the host's loopback and files are out of its reach."""
    import socket

    from servepack.smoke.bfcl import multi_turn

    wheel = tmp_path / "bfcl_eval"
    source = wheel / "eval_checker" / "multi_turn_eval" / "func_source_code"
    source.mkdir(parents=True)
    (wheel / "data").mkdir()
    (source / "long_context.py").write_text("")
    (source / "probe.py").write_text(PROBE)
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret")
    monkeypatch.setattr(multi_turn, "data_dir", lambda: wheel / "data")
    monkeypatch.setitem(multi_turn.CLASSES, "Probe", ("probe", "probe.json"))
    entry = MultiTurnEntry(id="multi_turn_base_901", category="multi_turn_base", turns=[[]], classes=["Probe"],
                           initial_config={"Probe": {"x": 1}}, functions=[])
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        calls = [{"name": "connect", "args": [port], "kwargs": {}}, {"name": "read", "args": [str(secret)],
                                                                         "kwargs": {}},
                 {"name": "read", "args": ["/etc/hostname"], "kwargs": {}}, {"name": "scenario", "kwargs": {}}]
        (turn,) = multi_turn.execute(entry, [[calls]])
    connect, secret_read, hostname, unknown = turn["model"][0]
    assert connect.startswith("refused: ") and secret_read == hostname == "unreadable: FileNotFoundError"
    assert unknown == "Error during execution: name 'scenario' is not defined"  # an attribute is no method
