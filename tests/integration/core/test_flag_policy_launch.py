"""Issue 25 item 1: a preset carrying a flag that reaches this host is refused before launch — no process started,
nothing resolved — and with `--allow-server-flag FAMILY` it is served and the receipt records the opt-in. The
engine checks again at launch (defence in depth)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.engine.base import LaunchRequest
from servepack.engine.llamacpp import LlamaCppEngine
from servepack.engine.locate import EngineFacts
from servepack.errors import UsageError
from servepack.packs import load_pack
from servepack.packs.schema import EnginePin, Preset
from servepack.plan import RunOptions, plan_run
from servepack.session import open_session

# (flag, TOML value, family): one per family of llama-server flags servepack holds.
DANGEROUS = [
    ("tools", '"all"', "tools"),
    ("path", '"/"', "serve-files"),
    ("slot-save-path", '"{scratch}"', "write-files"),
    ("lookup-cache-dynamic", '"{scratch}/lcd.bin"', "write-files"),
    ("chat-template-file", '"{scratch}/t.jinja"', "read-files"),
    ("video-ffmpeg-dir", '"{scratch}"', "exec"),
    ("models-dir", '"{scratch}"', "router"),
    ("mcp-servers-config", '"{scratch}/mcp.json"', "mcp"),
    ("hf-repo-draft", '"evil/draft"', "download"),
]


def _marking_server(directory: Path, marker: Path) -> Path:
    """A llama-server that appends its arguments to `marker` whenever it is started (its --version probe too), then
    runs the shared fake server."""
    exe = directory / "llama-server"
    exe.write_text(f"#!/bin/sh\necho \"$*\" >> {marker}\n"
                   f"exec {sys.executable} -m servepack.testing.fake_server \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def _with(pack: Path, flag: str, value: str, scratch: Path) -> Path:
    pack.write_text(pack.read_text().replace("jinja = true\n", f"jinja = true\n{flag} = "
                                             f"{value.format(scratch=scratch)}\n", 1))
    return pack


@pytest.mark.parametrize(("flag", "value", "family"), DANGEROUS)
def test_a_dangerous_preset_flag_is_refused_before_launch(tiny_pack: Path, tmp_path: Path, flag: str, value: str,
                                                           family: str) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    marker = tmp_path / "started"
    server = _marking_server(tmp_path, marker)
    pack = _with(tiny_pack, flag, value, scratch)
    out = tmp_path / "run"
    with pytest.raises(UsageError) as info:
        with open_session(plan_run(str(pack), options=RunOptions(out=out, server_bin=server))):
            pytest.fail("served without the opt-in")
    line = str(info.value)
    assert "\n" not in line and f"flag {flag!r}" in line and f"--allow-server-flag {family}" in line
    assert not marker.exists()  # no process was started
    assert not out.exists()  # nothing was written either: refused before the results directory
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(("flag", "value", "family"), [DANGEROUS[0], DANGEROUS[1], DANGEROUS[2]])
def test_with_the_opt_in_it_is_served_and_the_receipt_records_it(tiny_pack: Path, tmp_path: Path, flag: str,
                                                                  value: str, family: str) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    marker = tmp_path / "started"
    pack = _with(tiny_pack, flag, value, scratch)
    out = tmp_path / "run"
    with open_session(plan_run(str(pack), options=RunOptions(out=out, server_bin=_marking_server(tmp_path, marker),
                                                             allow_flags={family}))) as s:
        assert s.endpoint.base_url.startswith("http://127.0.0.1:")
    assert any(f"--{flag} " in line for line in marker.read_text().splitlines())  # served with the flag
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["server"]["allowed_flag_families"] == [family]
    assert f"--{flag}" in receipt["server"]["argv"] and receipt["status"] == "complete"


def test_an_opt_in_for_another_family_does_not_let_it_through(tiny_pack: Path, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    pack = _with(tiny_pack, "tools", '"all"', tmp_path)
    with pytest.raises(UsageError, match="--allow-server-flag tools"):
        with open_session(plan_run(str(pack), options=RunOptions(
                out=tmp_path / "run", server_bin=_marking_server(tmp_path, marker),
                allow_flags={"serve-files", "read-files"}))):
            pass
    assert not marker.exists()


def test_the_cli_refuses_with_one_line_and_exit_2(tiny_pack: Path, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    pack = _with(tiny_pack, "tools", '"all"', tmp_path)
    r = CliRunner().invoke(cli, ["serve", str(pack), "--server-bin", str(_marking_server(tmp_path, marker)),
                                 "--out", str(tmp_path / "run")])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "flag 'tools'" in lines[0] and "`--allow-server-flag tools`" in lines[0]
    assert not marker.exists() and not (tmp_path / "run").exists()


def test_the_engine_refuses_again_at_launch(tiny_pack: Path, tmp_path: Path) -> None:
    """Defence in depth: a request that skipped the session's check is refused by the engine, nothing started."""
    marker = tmp_path / "started"
    server = _marking_server(tmp_path, marker)
    facts = EngineFacts(name="llama-server", path=server, chosen_by="flag", sha256="0" * 64, version_text="v",
                        package=None, package_version=None, commit=None, pin_match=False, pin_reason="test")
    req = LaunchRequest(facts=facts, pin=EnginePin(name="llama.cpp", repo="r", commit="abc1234"),
                        model_path=tmp_path / "tiny.gguf", preset=Preset(flags={"tools": "all"}), host="127.0.0.1",
                        port=1, log_dir=tmp_path / "logs", health_timeout_s=5)
    with pytest.raises(UsageError, match=r"llama-server launch: flag 'tools'.*--allow-server-flag tools"):
        with LlamaCppEngine().launch(req):
            pass
    assert not marker.exists() and not (tmp_path / "logs").exists()
    assert load_pack(str(tiny_pack)).pack.engine.name == "llama.cpp"


def test_a_topology_worker_writing_a_host_cache_is_refused_before_any_worker_starts(tiny_pack: Path,
                                                                                   tmp_path: Path) -> None:
    marker = tmp_path / "started"
    cache = tmp_path / "worker-cache"
    tiny_pack.write_text(tiny_pack.read_text() + f'\n[topology]\npresets = ["p"]\n[[topology.workers]]\nport = 0\n'
                                                  f'start = true\ncache_dir = "{cache}"\n')
    with pytest.raises(UsageError, match=r"topology.workers\[0\].cache_dir: flag 'cache-dir' makes the server write "
                                         r"files.*--allow-server-flag write-files"):
        with open_session(plan_run(str(tiny_pack), options=RunOptions(out=tmp_path / "run",
                                                                      server_bin=_marking_server(tmp_path, marker)))):
            pass
    assert not marker.exists() and not cache.exists() and not (tmp_path / "run").exists()


def test_the_dry_run_says_a_run_would_refuse_it(tiny_pack: Path, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    pack = _with(tiny_pack, "path", '"/"', tmp_path)
    r = CliRunner().invoke(cli, ["run", str(pack), "--dry-run", "--server-bin", str(_marking_server(tmp_path, marker))])
    assert r.exit_code == 0, r.stderr
    said = " ".join((r.stdout + r.stderr).split())
    assert "a run refuses to launch this: preset 'p': flag 'path'" in said and "--allow-server-flag serve-files" in said
    assert all(" --path " not in f" {line} " for line in marker.read_text().splitlines())  # only --version ran


def test_a_flag_smuggled_as_a_value_is_refused_before_launch(tiny_pack: Path, tmp_path: Path) -> None:
    """`jinja = "--tools"`: jinja takes no value, so llama-server would read the next token as a flag of its own."""
    marker = tmp_path / "started"
    tiny_pack.write_text(tiny_pack.read_text().replace("jinja = true\n", 'jinja = "--tools"\nmetrics = "all"\n', 1))
    with pytest.raises(UsageError, match=r"flag 'tools'.*--allow-server-flag tools"):
        with open_session(plan_run(str(tiny_pack), options=RunOptions(out=tmp_path / "run",
                                                                      server_bin=_marking_server(tmp_path, marker)))):
            pass
    assert not marker.exists()


@pytest.mark.parametrize(("flag", "value"), [("hf-repo", '"evil/model"'), ("hff", '"evil.gguf"'),
                                             ("model-url", '"https://example.invalid/m.gguf"'), ("dr", '"gemma3"')])
def test_a_model_source_is_refused_before_launch_whatever_the_opt_ins(tiny_pack: Path, tmp_path: Path, flag: str,
                                                                      value: str) -> None:
    """The wrong answer: `--allow-server-flag download` served it, and the receipt named the hashed file while the
    server downloaded and served another model."""
    marker = tmp_path / "started"
    pack = _with(tiny_pack, flag, value, tmp_path)
    with pytest.raises(UsageError) as info:
        with open_session(plan_run(str(pack), options=RunOptions(
                out=tmp_path / "run", server_bin=_marking_server(tmp_path, marker),
                allow_flags={"download", "read-files", "write-files"}))):
            pytest.fail("served a model source with the opt-in")
    line = str(info.value)
    assert "\n" not in line and f"flag {flag!r} names where the server gets its model" in line
    assert "pin the model in the pack" in line
    assert not marker.exists() and not (tmp_path / "run").exists()
    facts = EngineFacts(name="llama-server", path=_marking_server(tmp_path, marker), chosen_by="flag",
                        sha256="0" * 64, version_text="v", package=None, package_version=None, commit=None,
                        pin_match=False, pin_reason="test")
    req = LaunchRequest(facts=facts, pin=EnginePin(name="llama.cpp", repo="r", commit="abc1234"),
                        model_path=tmp_path / "tiny.gguf", preset=Preset(flags={flag: "x"}), host="127.0.0.1",
                        port=1, log_dir=tmp_path / "logs", health_timeout_s=5, allowed_flags=frozenset({"download"}))
    with pytest.raises(UsageError, match=f"llama-server launch: flag {flag!r} names where the server gets its model"):
        with LlamaCppEngine().launch(req):  # the engine's own check (defence in depth) holds it too
            pass
    assert not marker.exists()
