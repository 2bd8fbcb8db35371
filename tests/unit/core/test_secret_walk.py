"""The helper the secrets tests rely on finds a value in clear wherever it lies: a wrong answer would fail them."""

from __future__ import annotations

import json
from pathlib import Path

from secret_walk import leaks


def test_the_walk_finds_a_short_a_numeric_and_an_escaped_value_in_any_file(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "server.log").write_bytes(b"argv: --api-key Zq~ --port 1\n")
    (tmp_path / "trials.jsonl").write_text(json.dumps({"flags": {"api-key": 9753108}}) + "\n")
    (tmp_path / "tune.json").write_text(json.dumps({"k": 'q"7'}))
    (tmp_path / "clean.json").write_text(json.dumps({"ttft_ms": 19753108.5, "n": 97531080}))
    found = leaks(tmp_path, ["Zq~", "9753108", 'q"7', "absent"])
    assert found == ["a/b/server.log: Zq~", "trials.jsonl: 9753108", 'tune.json: q"7']


def test_a_redacted_tree_has_no_leak(tmp_path: Path) -> None:
    (tmp_path / "receipt.json").write_text(json.dumps({"argv": ["--api-key", "<redacted>"]}))
    assert leaks(tmp_path, ["Zq~", "9753108"]) == []
