"""Issue 25 item 7: a key too short (or too numeric) to be scrubbed by value is still in no file of a run: it is
redacted by its name wherever it is written (receipt, engine log, MEASURED.md, the error shown); a switch about
tokens (`HF_HUB_DISABLE_IMPLICIT_TOKEN=1`) is recorded as it is. Every file under the results directory walked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from secret_walk import leaks
from servepack.errors import EngineError
from servepack.packs import load_pack
from servepack.pipeline.bench import bench_in_session
from servepack.plan import RunOptions, plan_run
from servepack.records.verify import verify_run
from servepack.redact import REDACTED
from servepack.report.measured import write_measured
from servepack.session import open_session
from servepack.testing import Script, ScriptedServer

# three characters (below every by-value threshold), six (below the store's), a number written bare in TOML
KEYS = [('"Zq~"', "Zq~"), ('"Zq~4xW"', "Zq~4xW"), ("9753108", "9753108")]


def _keyed(pack: Path, toml_value: str) -> Path:
    pack.write_text(pack.read_text().replace("jinja = true\n", f"jinja = true\napi-key = {toml_value}\n", 1))
    return pack


@pytest.mark.parametrize(("toml_value", "clear"), KEYS, ids=["3-chars", "6-chars", "numeric"])
def test_a_short_or_numeric_key_is_in_no_file_of_a_run(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path,
                                                       toml_value: str, clear: str) -> None:
    pack = _keyed(tiny_pack, toml_value)
    out = tmp_path / "run"
    with open_session(plan_run(str(pack), options=RunOptions(out=out, server_bin=fake_server_bin))):
        pass
    write_measured(out, load_pack(str(pack)).pack)
    assert leaks(out, [clear]) == []
    r = json.loads((out / "receipt.json").read_text())
    assert r["preset"]["flags"]["api-key"] == REDACTED and r["preset"]["flags"]["ctx-size"] == 512
    argv = r["server"]["argv"]
    assert argv[argv.index("--api-key") + 1] == REDACTED
    # the stand-in printed its argv with the key in it: the log says where it was
    assert f"'--api-key', '{REDACTED}'" in (out / "server.log").read_text()
    assert verify_run(out).ok  # the log was scrubbed before the receipt hashed it


@pytest.mark.parametrize(("toml_value", "clear"), KEYS, ids=["3-chars", "6-chars", "numeric"])
def test_an_engine_error_quoting_its_argv_shows_no_short_key(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, toml_value: str,
                                                            clear: str) -> None:
    monkeypatch.setenv("FAKE_MODE", "die_early")  # the stand-in prints its argv, then dies before /health
    out = tmp_path / "run"
    with pytest.raises(EngineError, match="before it was healthy") as info:
        with open_session(plan_run(str(_keyed(tiny_pack, toml_value)), options=RunOptions(out=out,
                                                                                          server_bin=fake_server_bin))):
            pytest.fail("must not start")
    assert f"'--api-key', '{REDACTED}'" in str(info.value)
    assert clear not in str(info.value).replace(str(tmp_path), "")
    assert leaks(out, [clear]) == []


def _attach_pack(pack: Path, base_url: str) -> Path:
    text = pack.read_text()
    start, end = text.index("[engine]"), text.index("[hardware]")
    pack.write_text(text[:start] + f'[engine]\nname = "attach"\nrepo = "r"\nbase_url = "{base_url}/v1"\n'
                    'served_model = "m"\n' + text[end:])
    return pack


def test_keys_in_the_environment_are_redacted_and_a_switch_about_tokens_is_kept(
        tiny_pack: Path, fake_server_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_API_KEY", "Zq~")
    monkeypatch.setenv("HF_TOKEN", "9753108")
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    attached = tmp_path / "attached"
    with ScriptedServer(Script(ttft_s=0.01, itl_s=0.002)) as srv:
        with open_session(plan_run(str(_attach_pack(tiny_pack, srv.base_url)), options=RunOptions(out=attached,
                                                                                                  kind="bench"))) as s:
            bench_in_session(s, lambda _: None, context_marks=(40,), gen_tokens=4, samples=1, warmup=0,
                             concurrency=(1,))
    env = json.loads((attached / "receipt.json").read_text())["environment"]
    assert env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] == "1"  # a switch, not a secret
    assert env["LLAMA_API_KEY"] == REDACTED and env["HF_TOKEN"] == REDACTED
    assert leaks(attached, ["Zq~", "9753108"]) == []


def test_a_key_in_the_environment_of_a_launched_server_is_dropped_by_name(
        tiny_pack: Path, fake_server_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_API_KEY", "Zq~")
    monkeypatch.setenv("HF_TOKEN", "9753108")
    out = tmp_path / "run"
    with open_session(plan_run(str(tiny_pack), options=RunOptions(out=out, server_bin=fake_server_bin))):
        pass
    r = json.loads((out / "receipt.json").read_text())
    assert {"LLAMA_API_KEY", "HF_TOKEN"} <= set(r["environment_dropped"])  # the names, never the values
    assert "LLAMA_API_KEY" not in r["environment"]
    assert leaks(out, ["Zq~", "9753108"]) == []
