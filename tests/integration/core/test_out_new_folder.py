"""`--out` of every command that makes a results directory (run, bench, smoke, capacity, tune, serve, llama-bench,
reproduce; bench, smoke and capacity attached too) is a new folder or an empty one, the one rule of
`store.check_new_out`. A folder holding anything, a file, a symbolic link (to a folder or to nothing) is refused
before anything runs: one line naming the folder and the fix, exit 2, the user's files byte for byte as they were,
nothing added, no server launched (the stand-in binary is never run, not even for --version), no attached server
asked anything (the one at --base-url is not there: asking it would be a different error). It was taken: the
session's teardown rewrote the user's own *.log files (secrets scrubbed by name) and the receipt hashed every file
in the folder. An empty folder is taken. Scratch directories and loopback only."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack import plan as plan_module
from servepack import store
from servepack.cli.main import cli
from servepack.engine.server import free_port

SEED = Path(__file__).parents[2] / "fixtures" / "registry" / "laguna_dgx_spark_record.json"
USER_LOG = b"my own notes\ncurl ... --api-key hunter2-not-a-real-key-0042\n"

COMMANDS = {
    "run": ["run", "{pack}", "--server-bin", "{bin}"],
    "bench": ["bench", "{pack}", "--server-bin", "{bin}"],
    "smoke": ["smoke", "run", "{pack}", "--suite", "agent_smoke", "--server-bin", "{bin}"],
    "capacity": ["capacity", "{pack}", "--server-bin", "{bin}", "--slo", "ttft_p90=1s"],
    "tune": ["tune", "{pack}", "--server-bin", "{bin}"],
    "serve": ["serve", "{pack}", "--server-bin", "{bin}"],
    "llama-bench": ["llama-bench", "{pack}", "--bench-bin", "{bin}"],
    "reproduce": ["reproduce", str(SEED), "{pack}", "--server-bin", "{bin}"],
    "bench attached": ["bench", "--base-url", "{url}", "--model", "m"],
    "smoke attached": ["smoke", "run", "--base-url", "{url}", "--model", "m", "--suite", "agent_smoke"],
    "capacity attached": ["capacity", "--base-url", "{url}", "--model", "m", "--slo", "ttft_p90=1s"],
}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Scratch cache and results roots, and a stand-in llama-server that notes each time it is run."""
    monkeypatch.setenv("SERVEPACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SERVEPACK_RESULTS_DIR", str(tmp_path / "results"))
    marker = tmp_path / "server-was-run"
    exe = tmp_path / "bin" / "llama-server"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\necho \"$@\" >> '{marker}'\nexec {sys.executable} -m servepack.testing.fake_server "
                   "\"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return {"bin": exe, "marker": marker, "results": tmp_path / "results", "cache": tmp_path / "cache"}


def _argv(name: str, tiny_pack: Path, env: dict[str, Path], out: Path) -> list[str]:
    url = f"http://127.0.0.1:{free_port()}"
    return [a.format(pack=tiny_pack, bin=env["bin"], url=url) for a in COMMANDS[name]] + ["--out", str(out)]


def _snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under `root` (itself included): a file's bytes, a link's target, a folder as such."""
    found: dict[str, bytes | str] = {}
    for p in [root, *sorted(root.rglob("*"))] if root.is_dir() and not root.is_symlink() else [root]:
        key = str(p.relative_to(root.parent))
        found[key] = (f"link to {os.readlink(p)}" if p.is_symlink() else "folder" if p.is_dir() else p.read_bytes())
    return found


def _user_folder(tmp_path: Path) -> Path:
    mine = tmp_path / "mine"
    (mine / "keep").mkdir(parents=True)
    (mine / "notes.log").write_bytes(USER_LOG)
    (mine / "keep" / "data.csv").write_bytes(b"a,b\n1,2\n")
    return mine


def _refused(name: str, tiny_pack: Path, env: dict[str, Path], out: Path, watched: Path) -> str:
    """Run the command at `out`; assert the refusal left `watched` as it was and ran nothing; its one line."""
    before = _snapshot(watched)
    result = CliRunner().invoke(cli, _argv(name, tiny_pack, env, out))
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert _snapshot(watched) == before  # byte for byte, nothing added, nothing removed
    assert not env["marker"].exists()  # no server launched, not even asked its version
    assert not env["results"].exists()  # no results directory made elsewhere instead
    return result.stderr.strip()


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_folder_holding_anything_is_refused_before_anything_runs(name: str, tiny_pack: Path, tmp_path: Path,
                                                                   env: dict[str, Path]) -> None:
    mine = _user_folder(tmp_path)
    line = _refused(name, tiny_pack, env, mine, mine)
    assert line == (f"servepack: error: --out {mine}: the folder exists and is not empty ('keep' and 1 more); "
                    "servepack writes its results only into a new or empty folder: choose a new folder or remove it")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_file_or_a_link_at_out_is_refused(name: str, tiny_pack: Path, tmp_path: Path,
                                            env: dict[str, Path]) -> None:
    file = tmp_path / "a-file"
    file.write_bytes(USER_LOG)
    line = _refused(name, tiny_pack, env, file, file)
    assert line == (f"servepack: error: cannot create the results directory {file}: {file} is a file, not a "
                    "directory; choose another --out (or SERVEPACK_RESULTS_DIR)")
    empty = tmp_path / "empty-target"
    empty.mkdir()
    for target in (empty, tmp_path / "nowhere"):  # a link to an empty folder, a link to nothing
        link = tmp_path / "link"
        link.symlink_to(target)
        line = _refused(name, tiny_pack, env, link, tmp_path)
        assert line == (f"servepack: error: --out {link}: a symbolic link (to {target}); servepack makes its "
                        "results folder itself: give a new folder's path, not a link")
        link.unlink()
    assert not (tmp_path / "nowhere").exists() and list(empty.iterdir()) == []


def test_a_folder_holding_only_a_hidden_file_is_not_empty(tiny_pack: Path, tmp_path: Path,
                                                          env: dict[str, Path]) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / ".git").write_bytes(b"gitdir: elsewhere\n")
    line = _refused("bench", tiny_pack, env, mine, mine)
    assert f"--out {mine}: the folder exists and is not empty ('.git'); " in line


def test_an_empty_folder_is_taken_as_the_results_directory(tiny_pack: Path, tmp_path: Path,
                                                           env: dict[str, Path]) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    result = CliRunner().invoke(cli, [*_argv("bench", tiny_pack, env, out), "--prompt-tokens", "40",
                                      "--gen-tokens", "8", "--samples", "3"])
    assert result.exit_code == 0, result.output
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["kind"] == "bench" and "server_bench.json" in receipt["files"]
    assert env["marker"].exists() and not env["results"].exists()  # launched, and into the folder given


def test_without_the_rule_the_users_log_is_rewritten_and_hashed(tiny_pack: Path, tmp_path: Path,
                                                                env: dict[str, Path],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrong answer the refusal prevents, and that the checks above would see: with the rule switched off, the
    same bench into the user's folder ends well, rewrites their notes.log and hashes it into its receipt."""
    def nothing(_path: Path) -> None:
        return None

    monkeypatch.setattr(store, "check_new_out", nothing)
    monkeypatch.setattr(plan_module, "check_new_out", nothing)
    mine = _user_folder(tmp_path)
    before = _snapshot(mine)
    result = CliRunner().invoke(cli, [*_argv("bench", tiny_pack, env, mine), "--prompt-tokens", "40",
                                      "--gen-tokens", "8", "--samples", "3"])
    assert result.exit_code == 0, result.output
    after = _snapshot(mine)
    assert after != before and set(before) < set(after)  # files added beside the user's
    assert after["mine/notes.log"] != USER_LOG and b"hunter2-not-a-real-key-0042" not in after["mine/notes.log"]
    receipt = json.loads((mine / "receipt.json").read_text())
    assert {"notes.log", "keep/data.csv"} <= set(receipt["files"])
