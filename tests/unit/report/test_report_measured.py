"""MEASURED.md from a results history: one headline, noise floor labelled, tip binds, older runs historical."""

from __future__ import annotations

import re
from pathlib import Path

from records_synth import make_run

from servepack.packs import load_pack
from servepack.records.verify import verify_run
from servepack.report.measured import write_measured

PACK = load_pack(None).pack


def _headlines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("**Headline:**")]


def test_headline_once_from_the_newest_qualifying_run(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    make_run(root, "a-old", ended_at="2026-07-27T10:00:00.000Z", decode=(30.0, 30.5, 29.9))
    new = make_run(root, "b-new", ended_at="2026-07-28T10:00:00.000Z", decode=(36.0, 36.4, 35.7))
    text = write_measured(new, PACK).read_text()
    assert len(_headlines(text)) == 1
    assert text.count("**Headline:**") == 1
    head = _headlines(text)[0]
    assert "**36.00**" in head and "run `b-new`" in head and "on **cpu-generic**" in head
    assert "1,024-token prompt" in head and "@ 128 gen" in head
    old_row = next(line for line in text.splitlines() if "run `a-old`" in line and line.startswith("|"))
    assert "historical (2026-07-27 10:00 UTC; superseded by `b-new`)" in old_row
    assert "- `a-old` · run · complete · 2026-07-27 10:00 UTC · cpu-generic · historical only" in text
    assert verify_run(new).ok  # MEASURED.md is derived: not an added file


def test_noise_floor_run_is_shown_labelled_and_never_headlined(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    make_run(root, "a-full", ended_at="2026-07-28T09:00:00.000Z", decode=(21.4, 21.5, 21.47))
    gen8 = make_run(root, "b-gen8", ended_at="2026-07-28T10:00:00.000Z", gen=8, decode=(10.6, 10.61, 10.62))
    text = write_measured(gen8, PACK).read_text()
    (head,) = _headlines(text)
    assert "**21.47**" in head and "run `a-full`" in head
    row = next(line for line in text.splitlines() if "run `b-gen8`" in line and line.startswith("|"))
    assert "**noise floor — shown, never a headline**" in row and "@ 8 gen" in row
    assert "10.61" in row and "10.61" not in head


def test_no_qualifying_run_says_so(tmp_path: Path) -> None:
    gen8 = make_run(tmp_path / PACK.id, "only-gen8", gen=8, decode=(10.0, 10.1, 10.2))
    (head,) = _headlines(write_measured(gen8, PACK).read_text())
    assert head.startswith("**Headline:** none — no complete run of preset default measured 1,024 prompt tokens")


def test_headline_labelled_with_the_attributed_hardware(tmp_path: Path) -> None:
    run = make_run(tmp_path / PACK.id, "r")
    receipt = (run / "receipt.json")
    text = receipt.read_text().replace('"attributed_id": "cpu-generic"', '"attributed_id": "cpu-test-cpu-9000-2c-24gb"')
    receipt.chmod(0o644)
    receipt.write_text(text)
    (head,) = _headlines(write_measured(run, PACK).read_text())
    assert "on **cpu-test-cpu-9000-2c-24gb**" in head


def test_smoke_tip_binds_and_older_durations_are_historical(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    make_run(root, "a", ended_at="2026-07-28T09:00:00.000Z", smoke=(True, False, False, False))
    new = make_run(root, "b", ended_at="2026-07-28T10:00:00.000Z", smoke=(True, True, True, True))
    text = write_measured(new, PACK).read_text()
    rows = [line for line in text.splitlines() if line.startswith("| agent_smoke")]
    assert len(rows) == 1
    assert "**4/4 · 100%**" in rows[0] and "`b/agent_smoke.json`" in rows[0]
    assert "older runs 84.86 s (2026-07-28 09:00 UTC) are historical only" in rows[0]
    assert "one-response: tools validated, not executed" in rows[0] and "`3bb81080…`" in rows[0]


def test_candidate_decision_is_measured_when_both_presets_ran(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    make_run(root, "base", ended_at="2026-07-28T09:00:00.000Z", decode=(36.0, 36.4, 35.7))
    cand = make_run(root, "cand", ended_at="2026-07-28T10:00:00.000Z", preset="spec-ngram",
                    decode=(20.0, 20.5, 19.9))
    text = write_measured(cand, PACK).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| spec-ngram"))
    assert "**DO_NOT_PROMOTE**" in row and "decode_tok_s (server): worse" in row
    assert re.search(r"pack declared UNTESTED", row)


def test_rerender_replaces_the_derived_file(tmp_path: Path) -> None:
    run = make_run(tmp_path / PACK.id, "r")
    first = write_measured(run, PACK)
    second = write_measured(run, PACK)
    assert first == second and second.read_text().startswith("# MEASURED — qwen2.5-coder-0.5b-cpu")
