"""The trial log (torn lines, edits), the user pack writer (never a shipped pack), durations."""

from __future__ import annotations

from pathlib import Path

import pytest

from servepack.cli.tune import parse_duration
from servepack.errors import UsageError
from servepack.packs import load_pack, load_pack_file, shipped_pack_paths
from servepack.tune.trials import TRIALS_NAME, TrialRecord, append_trial, read_trials
from servepack.tune.userpack import preset_toml, write_preset


def _rec(n: int) -> TrialRecord:
    return TrialRecord(trial=n, phase="screen", key=f"threads={n}", config={"threads": n}, status="ok",
                       samples=[1.0], results_dir=f"trials/{n:03d}", started_at="t", wall_s=1.0)


def test_the_log_round_trips_and_drops_a_torn_last_line(tmp_path: Path) -> None:
    for n in (1, 2):
        append_trial(tmp_path, _rec(n))
    with (tmp_path / TRIALS_NAME).open("a") as fh:
        fh.write('{"schema_version": "servepack.tune.trial/v1", "trial": 3, "pha')
    assert [t.trial for t in read_trials(tmp_path)] == [1, 2]
    append_trial(tmp_path, _rec(3))  # the torn line is cut before the next one is written
    assert [t.trial for t in read_trials(tmp_path)] == [1, 2, 3]


def test_an_edited_log_is_refused(tmp_path: Path) -> None:
    (tmp_path / TRIALS_NAME).write_text(_rec(2).model_dump_json() + "\n" + _rec(1).model_dump_json() + "\n")
    with pytest.raises(UsageError, match="repeat or go back"):
        read_trials(tmp_path)
    (tmp_path / TRIALS_NAME).write_text('{"trial": "x"}\n' + _rec(1).model_dump_json() + "\n")
    with pytest.raises(UsageError, match="line 1 is not a trial record"):
        read_trials(tmp_path)


def test_the_best_preset_goes_into_a_new_user_pack_then_beside_it(tmp_path: Path) -> None:
    source = load_pack(None)
    mine = tmp_path / "mine.toml"
    flags = {**source.pack.presets["default"].flags, "threads": 8, "flash-attn": "on", "note": 'say "hi"\\ \u00e9'}
    assert write_preset(mine, source, "tuned", "tuned by test", flags) == "tuned"
    assert write_preset(mine, source, "tuned", "again", {**flags, "threads": 4}) == "tuned-2"
    pack = load_pack_file(mine).pack
    assert pack.presets["tuned"].flags["threads"] == 8 and pack.presets["tuned-2"].flags["threads"] == 4
    assert pack.presets["tuned"].flags["note"] == 'say "hi"\\ \u00e9' and pack.presets["tuned"].role == "candidate"
    assert source.path.read_text() == load_pack(None).path.read_text()


def test_a_shipped_pack_or_another_packs_file_is_refused(tmp_path: Path) -> None:
    source = load_pack(None)
    for shipped in shipped_pack_paths().values():
        before = shipped.read_bytes()
        with pytest.raises(UsageError, match="shipped pack"):
            write_preset(shipped, source, "tuned", "x", {"threads": 2})
        assert shipped.read_bytes() == before
    other = next(p for i, p in shipped_pack_paths().items() if i != source.pack.id)
    theirs = tmp_path / "theirs.toml"
    theirs.write_text(other.read_text())
    with pytest.raises(UsageError, match=r"not 'qwen2\.5-coder-0\.5b-cpu'"):
        write_preset(theirs, source, "tuned", "x", {"threads": 2})
    (tmp_path / "junk.toml").write_text("not = [toml")
    with pytest.raises(UsageError, match="not a valid pack"):
        write_preset(tmp_path / "junk.toml", source, "tuned", "x", {"threads": 2})
    with pytest.raises(UsageError, match="does not exist"):
        write_preset(tmp_path / "no" / "dir.toml", source, "tuned", "x", {"threads": 2})


def test_preset_toml_values() -> None:
    text = preset_toml("t", "d", {"threads": 8, "fa": True, "x": 1.5, "s": "on"})
    assert "threads = 8\nfa = true\nx = 1.5\ns = \"on\"" in text


@pytest.mark.parametrize(("text", "seconds"), [("600", 600.0), ("90s", 90.0), ("30m", 1800.0), ("1.5h", 5400.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10d", "-5m", "0", "1e9", "30 minutes", "9999h"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(UsageError, match="--budget-time"):
        parse_duration(text)


def test_a_damaged_plan_is_refused_on_resume(tmp_path: Path) -> None:
    from servepack.tune.trials import PLAN_NAME, read_plan

    with pytest.raises(UsageError, match=r"no tune\.json"):
        read_plan(tmp_path)
    (tmp_path / PLAN_NAME).write_text('{"schema_version": "servepack.tune.plan/v1"}')
    with pytest.raises(UsageError, match="not a tune plan of this servepack"):
        read_plan(tmp_path)
