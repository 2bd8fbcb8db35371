"""Issue 25 item 7: a secret in a tune never lands in a file. A space refuses a secret-bearing flag with one line;
a base preset's --api-key is redacted in tune.json, trials.jsonl and every trial's files (every file walked)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tune_fixtures import write_space

from secret_walk import leaks
from servepack.cli.main import cli
from servepack.errors import UsageError
from servepack.plan import RunPlan

KEY = "sk-tune-9a8b7c6d5e4f3a2b"


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_a_space_with_an_api_key_is_refused_with_one_line(tune_pack: Path, surface_bin: Path, tmp_path: Path) -> None:
    space = write_space(tmp_path, f'[tune]\nthreads = [4, 8]\napi-key = ["{KEY}", "other-key-value"]\n')
    out = tmp_path / "tune"
    r = CliRunner().invoke(cli, ["tune", str(tune_pack), "--space", str(space), "--server-bin", str(surface_bin),
                                 "--out", str(out)])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "flag 'api-key' carries a secret" in lines[0] and KEY not in lines[0]
    assert not out.exists() or _files(out) == []  # nothing written, no server started


def test_a_base_presets_api_key_is_in_no_file_of_the_tune(tune_pack: Path, surface_bin: Path,
                                                          tmp_path: Path) -> None:
    pack = tmp_path / "keyed.toml"
    pack.write_text(tune_pack.read_text().replace('alias = "tiny"\n', f'alias = "tiny"\napi-key = "{KEY}"\n', 1))
    space = write_space(tmp_path, '[tune]\nthreads = [4, 8]\nflash-attn = "on"\n')
    out = tmp_path / "tune"
    r = CliRunner().invoke(cli, ["tune", str(pack), "--space", str(space), "--server-bin", str(surface_bin),
                                 "--out", str(out), "--budget-trials", "2", "--confirm-samples", "2"])
    assert r.exit_code == 0, r.stderr
    written = _files(out)
    names = {p.name for p in written}
    assert {"tune.json", "trials.jsonl", "receipt.json", "server.log"} <= names, names
    for path in written:
        assert KEY.encode() not in path.read_bytes(), f"{KEY} leaked into {path.relative_to(out)}"
    assert b"<redacted>" in (out / "tune.json").read_bytes()  # the fact a key was set is kept


def _keyed_pack(tune_pack: Path, tmp_path: Path, flag_line: str) -> Path:
    pack = tmp_path / "keyed.toml"
    pack.write_text(tune_pack.read_text().replace('alias = "tiny"\n', f'alias = "tiny"\n{flag_line}\n', 1))
    return pack


def test_write_pack_refuses_a_base_presets_api_key_before_tuning(tune_pack: Path, surface_bin: Path,
                                                                 tmp_path: Path) -> None:
    """--write-pack would copy the base preset's key into the user's pack file: one line naming the fix, exit 2,
    no pack file, nothing tuned."""
    pack = _keyed_pack(tune_pack, tmp_path, f'api-key = "{KEY}"')
    space = write_space(tmp_path, '[tune]\nthreads = [4, 8]\n')
    out, mine = tmp_path / "tune", tmp_path / "mine.toml"
    r = CliRunner().invoke(cli, ["tune", str(pack), "--space", str(space), "--server-bin", str(surface_bin),
                                 "--out", str(out), "--budget-trials", "2", "--write-pack", str(mine)])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and KEY not in lines[0]
    assert "flag 'api-key', a secret" in lines[0] and 'api-key-file = "PATH"' in lines[0]
    assert not mine.exists()
    assert not out.exists() or _files(out) == []


def test_write_pack_refuses_a_new_file_that_would_copy_another_presets_key(tune_pack: Path, tmp_path: Path) -> None:
    """A new pack file starts as a copy of the source pack: a key in any of its presets would be copied too."""
    from servepack.packs import load_pack_file
    from servepack.tune.userpack import check_target, write_preset

    text = tune_pack.read_text() + f'\n[presets.served.flags]\nctx-size = 512\nhf-token = "{KEY}"\n'
    pack = tmp_path / "two.toml"
    pack.write_text(text)
    source = load_pack_file(pack)
    mine = tmp_path / "mine.toml"
    with pytest.raises(UsageError, match="preset 'served' holds a secret in flag 'hf-token'") as exc:
        check_target(mine, source, {"threads": 8})
    assert KEY not in str(exc.value)
    with pytest.raises(UsageError):  # the writer itself refuses too, whoever calls it
        write_preset(mine, source, "tuned", "d", {"threads": 8})
    assert not mine.exists()
    with pytest.raises(UsageError, match="flag 'api-key', a secret"):
        write_preset(tmp_path / "other.toml", load_pack_file(tune_pack), "tuned", "d", {"api-key": "abc"})
    assert not (tmp_path / "other.toml").exists()


def test_write_pack_writes_an_api_key_file_reference_never_the_key(tune_pack: Path, surface_bin: Path,
                                                                  tmp_path: Path) -> None:
    """The fix the refusal names works: the preset gives the key by `api-key-file`; the written pack holds its path
    and no file of the tune holds the key."""
    keys = tmp_path / "server.keys"
    keys.write_text(KEY + "\n")
    pack = _keyed_pack(tune_pack, tmp_path, f'api-key-file = "{keys}"')
    space = write_space(tmp_path, '[tune]\nthreads = [4, 8]\n')
    out, mine = tmp_path / "tune", tmp_path / "mine.toml"
    r = CliRunner().invoke(cli, ["tune", str(pack), "--space", str(space), "--server-bin", str(surface_bin),
                                 "--out", str(out), "--budget-trials", "2", "--confirm-samples", "2",
                                 "--allow-server-flag", "read-files", "--write-pack", str(mine)])
    assert r.exit_code == 0, r.stderr
    written = mine.read_bytes()
    assert KEY.encode() not in written
    from servepack.packs import load_pack_file

    assert load_pack_file(mine).pack.presets["tuned"].flags["api-key-file"] == str(keys)
    for path in _files(out):
        assert KEY.encode() not in path.read_bytes(), f"{KEY} leaked into {path.relative_to(out)}"


class Interrupt(KeyboardInterrupt):
    pass


@pytest.mark.parametrize(("toml_value", "served_value"), [('"Zq~"', "Zq~"), ("9753108", 9753108)],
                         ids=["3-chars", "numeric"])
def test_a_short_or_numeric_key_is_in_no_file_and_resume_serves_the_packs_key(
        tune_pack: Path, surface_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toml_value: str,
        served_value: object) -> None:
    """Too short or numeric to be scrubbed by value: redacted by name in tune.json, trials.jsonl and every trial's
    files. tune.json keeps no key, so every trial — resumed ones and the compare too — takes it from the pack."""
    import servepack.pipeline.tune as tune_mod
    from servepack.pipeline.tune import TuneRequest, tune
    from servepack.redact import REDACTED

    clear = str(served_value)
    pack = _keyed_pack(tune_pack, tmp_path, f"api-key = {toml_value}")
    space = write_space(tmp_path, '[tune]\nthreads = [4, 8]\nflash-attn = "on"\n')
    out = tmp_path / "tune"
    served: list[object] = []
    real = tune_mod.open_session

    def spy(plan: RunPlan) -> Any:
        served.append(plan.preset.flags.get("api-key"))
        return real(plan)

    monkeypatch.setattr(tune_mod, "open_session", spy)

    def stop_after_first(message: str) -> None:
        if message.startswith("trial 1/"):
            raise Interrupt

    with pytest.raises(Interrupt):
        tune(TuneRequest(pack_ref=str(pack), space_file=space, server_bin=surface_bin, out=out, budget_trials=3,
                         confirm_samples=2), stop_after_first)
    assert json.loads((out / "tune.json").read_text())["base_flags"]["api-key"] == REDACTED
    assert leaks(out, [clear]) == [] and served == [served_value]
    outcome = tune(TuneRequest(resume=out))
    assert len(outcome.trials) == 3 and all(t.status == "ok" for t in outcome.trials)
    assert len(served) >= 3 and set(served) == {served_value}  # never "<redacted>"
    assert leaks(out, [clear]) == []
    assert f"'--api-key', '{REDACTED}'" in (out / "trials" / "002" / "server.log").read_text()


def test_resume_refuses_a_pack_that_no_longer_gives_the_key(tune_pack: Path, surface_bin: Path,
                                                            tmp_path: Path) -> None:
    pack = _keyed_pack(tune_pack, tmp_path, 'api-key = "Zq~"')
    space = write_space(tmp_path, '[tune]\nthreads = [4, 8]\n')
    out = tmp_path / "tune"
    r = CliRunner().invoke(cli, ["tune", str(pack), "--space", str(space), "--server-bin", str(surface_bin),
                                 "--out", str(out), "--budget-trials", "1"])
    assert r.exit_code == 0, r.stderr
    pack.write_text(pack.read_text().replace('api-key = "Zq~"\n', ""))
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    r = CliRunner().invoke(cli, ["tune", "--resume", str(out), "--budget-trials", "2"])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no longer gives flag 'api-key'" in lines[0] and "put it back" in lines[0]
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # nothing started, nothing written


def test_rejected_trials_quote_their_log_without_a_short_key(tune_pack: Path, surface_bin: Path,
                                                             tmp_path: Path) -> None:
    """Every trial fails to start (too many threads): trials.jsonl keeps each one's log tail and reason, the error
    shown names the first — the stand-in printed its argv, key and all, and none of them holds the key."""
    pack = _keyed_pack(tune_pack, tmp_path, 'api-key = "Zq~"')
    pack.write_text(pack.read_text().replace('threads = 4\nflash-attn = "off"\n',
                                             'threads = 16\nubatch-size = 1024\nflash-attn = "on"\n'))
    space = write_space(tmp_path, '[tune]\nthreads = 16\nubatch-size = 1024\nbatch-size = 2048\n')
    out = tmp_path / "tune"
    r = CliRunner().invoke(cli, ["tune", str(pack), "--space", str(space), "--server-bin", str(surface_bin),
                                 "--out", str(out)])
    assert r.exit_code != 0 and "tune measured nothing" in r.stderr
    assert "Zq~" not in (r.stdout + r.stderr).replace(str(tmp_path), "")
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert trials and {t["status"] for t in trials} == {"rejected"}
    assert all("'--api-key', '<redacted>'" in t["log_tail"] for t in trials)
    assert leaks(out, ["Zq~"]) == []
