"""Issue 25 item 7: one redaction on every byte written through the store: registered secret values never land."""

from __future__ import annotations

import json
from pathlib import Path

from servepack.store import REDACTED, ResultsDir, register_secrets, scrubbed


def test_every_store_writer_replaces_a_registered_secret(tmp_path: Path) -> None:
    key = 'sk-store-"quoted"-7c6b5a49'
    register_secrets([key, "short"])
    results = ResultsDir(tmp_path / "run")
    results.write_json("a.json", {"flags": {"api-key": key}, "note": f"launched with {key}"})
    results.write_text("b.txt", f"key={key}\n")
    with results.jsonl("c.jsonl") as w:
        w.write({"argv": ["--api-key", key]})
    for name in ("a.json", "b.txt", "c.jsonl"):
        data = (results.path / name).read_bytes()
        assert key.encode() not in data and json.dumps(key)[1:-1].encode() not in data, name
        assert REDACTED.encode() in data, name
    doc = json.loads((results.path / "a.json").read_text())
    assert doc == {"flags": {"api-key": REDACTED}, "note": f"launched with {REDACTED}"}  # still valid JSON


def test_a_short_value_is_not_scrubbed_from_whole_files() -> None:
    register_secrets(["abc", "short"])  # shorter than MIN_SECRET_LEN: could be part of a hash or a figure
    assert scrubbed(b"abc short 0abc1") == b"abc short 0abc1"
