"""Issue 25 items 1 and 2 on the real llama-server: LLAMA_ARG_TOOLS in servepack's environment does not turn the
server's tools on (GET /tools is refused) and LLAMA_ARG_LOG_FILE does not move its log; a preset with tools = "all"
is refused without the opt-in and, with `tools` allowed, serves GET /tools listing exec_shell_command."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from servepack.errors import UsageError
from servepack.packs import load_pack
from servepack.packs.schema import Preset
from servepack.plan import RunOptions, plan_run
from servepack.session import open_session


def test_the_environment_cannot_turn_the_real_servers_tools_on(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    escaped = tmp_path / "elsewhere.log"
    monkeypatch.setenv("LLAMA_ARG_TOOLS", "all")
    monkeypatch.setenv("LLAMA_ARG_LOG_FILE", str(escaped))
    with open_session(plan_run(None, options=RunOptions(out=tmp_path / "run", kind="e2e"))) as s:
        r = httpx.get(f"{s.endpoint.base_url}/tools", timeout=10)
    assert r.status_code == 403 and "disabled" in r.text
    assert not escaped.exists() and (tmp_path / "run" / "server.log").stat().st_size > 0
    dropped = json.loads((tmp_path / "run" / "receipt.json").read_text())["environment_dropped"]
    assert {"LLAMA_ARG_TOOLS", "LLAMA_ARG_LOG_FILE"} <= set(dropped)


def test_a_tools_preset_is_refused_and_with_the_opt_in_serves_its_tools(tmp_path: Path) -> None:
    pack = load_pack(None).pack
    flags = {**pack.presets[pack.default_preset].flags, "tools": "all"}
    preset = Preset(flags=flags, role="experiment")
    with pytest.raises(UsageError, match="--allow-server-flag tools"):
        with open_session(plan_run(None, options=RunOptions(out=tmp_path / "refused", kind="e2e",
                                                            preset_override=preset))):
            pass
    assert not (tmp_path / "refused").exists()
    with open_session(plan_run(None, options=RunOptions(out=tmp_path / "run", kind="e2e", preset_override=preset,
                                                        allow_flags={"tools"}))) as s:
        r = httpx.get(f"{s.endpoint.base_url}/tools", timeout=10)
    assert r.status_code == 200
    assert "exec_shell_command" in {t.get("tool") for t in r.json()}  # what the opt-in lets in, for real
    receipt = json.loads((tmp_path / "run" / "receipt.json").read_text())
    assert receipt["server"]["allowed_flag_families"] == ["tools"]
