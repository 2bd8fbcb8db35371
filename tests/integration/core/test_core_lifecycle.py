"""Server lifecycle against a stand-in binary: health gate, failures with log tails, teardown, receipts."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
from core_fixtures import make_pack

from servepack.errors import ClaimRefused, EngineError, ServerDied
from servepack.plan import RunOptions, plan_run
from servepack.session import open_session


def _receipt(out: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((out / "receipt.json").read_text())


def test_healthy_session_records_a_complete_receipt(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with open_session(plan_run(str(tiny_pack), options=RunOptions(out=out, server_bin=fake_server_bin))) as s:
        pid = s.endpoint.pid
        assert s.endpoint.base_url.startswith("http://127.0.0.1:")
        assert s.endpoint.props is not None and s.endpoint.props["build_info"] == "b1-fake"
        s.results.write_json("extra.json", {"schema_version": "t/v1"})
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    r = _receipt(out)
    assert r["status"] == "complete" and r["error"] is None
    assert r["server"]["argv"][1:3] == ["--model", str(tmp_path / "tiny.gguf")]
    assert r["server"]["fidelity"] == "faithful" and "--jinja" in r["server"]["argv"]
    assert r["engine"]["pin_match"] is True and r["engine"]["chosen_by"] == "flag"
    assert r["model"]["pin_match"] is True and r["model"]["gguf"]["architecture"] == "llama"
    assert set(r["files"]) == {"server.log", "extra.json", "memory.jsonl", "memory_summary.json"}
    assert r["hardware"]["attributed_id"] == "cpu-generic"


def test_server_dying_before_health_shows_its_log(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "die_early")
    with pytest.raises(EngineError, match=r"exited with code 3 before it was healthy") as info:
        with open_session(plan_run(str(tiny_pack), options=RunOptions(out=tmp_path / "run",
                                                                      server_bin=fake_server_bin))):
            pytest.fail("session must not start")
    assert "failed to load model (fake)" in str(info.value)
    assert _receipt(tmp_path / "run")["status"] == "failed"


def test_health_deadline(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "never_healthy")
    monkeypatch.setenv("SERVEPACK_HEALTH_TIMEOUT_S", "1.5")
    with pytest.raises(EngineError, match=r"not healthy after 2 s \(HTTP 503\)"):
        with open_session(plan_run(str(tiny_pack), options=RunOptions(out=tmp_path / "run",
                                                                      server_bin=fake_server_bin))):
            pytest.fail("session must not start")


def test_teardown_reaches_children_on_error(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "spawn_child")
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="boom"):
        with open_session(plan_run(str(tiny_pack), options=RunOptions(out=out, server_bin=fake_server_bin))) as s:
            group = s.endpoint.pid
            deadline = time.monotonic() + 10
            while not (m := re.search(r"child pid (\d+)", (out / "server.log").read_text())):
                assert time.monotonic() < deadline, "the stand-in never reported its child"
                time.sleep(0.05)
            child = int(m.group(1))
            assert psutil.pid_exists(child)
            raise RuntimeError("boom")
    survivors = [p for p in (group, child) if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert survivors == []
    r = _receipt(out)
    assert r["status"] == "partial" and r["error"] == "RuntimeError: boom"


def test_server_killed_mid_session_is_server_died(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(ServerDied, match="exited with code -9 during the run; partial results kept"):
        with open_session(plan_run(str(tiny_pack), options=RunOptions(out=out, server_bin=fake_server_bin))) as s:
            s.results.write_json("partial.json", {"schema_version": "t/v1", "done": 1})
            os.kill(s.endpoint.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # check_alive raises once the kill has landed
                s.endpoint.check_alive()
                time.sleep(0.05)
    r = _receipt(out)
    assert r["status"] == "partial" and "partial.json" in r["files"]


def test_claim_for_spark_refused_with_what_was_detected(fake_server_bin: Path, tmp_path: Path) -> None:
    pack = make_pack(tmp_path, hardware="spark")
    with pytest.raises(ClaimRefused) as info:
        with open_session(plan_run(str(pack), options=RunOptions(out=tmp_path / "run", server_bin=fake_server_bin,
                                                                 claim=True))):
            pytest.fail("claim must be refused before launch")
    msg = str(info.value)
    assert msg.startswith("claim refused: hardware: detected ")
    assert "not dgx-spark-gb10-128gb" in msg and "GPU name" in msg
    assert not (tmp_path / "run").exists()


def test_unclaimed_run_on_wrong_hardware_is_labelled_detected(fake_server_bin: Path, tmp_path: Path) -> None:
    pack = make_pack(tmp_path, hardware="spark")
    out = tmp_path / "run"
    with open_session(plan_run(str(pack), options=RunOptions(out=out, server_bin=fake_server_bin))):
        pass
    r = _receipt(out)
    assert r["hardware"]["target_match"] is False
    assert r["hardware"]["attributed_id"] == r["hardware"]["detected_id"] != "dgx-spark-gb10-128gb"
    assert r["claim"]["eligible"] is False
    assert any(x.startswith("hardware: detected") for x in r["claim"]["reasons"])


def test_unpinned_build_is_marked_in_the_receipt(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path) -> None:
    from servepack.engine.buildrecord import BUILD_RECORD, BuildRecord

    record = BuildRecord(
        servepack_version="t", pack_id="tiny-test", pack_sha256="0" * 64, source="/src", source_is_git=True,
        source_commit="f" * 40, pinned_commit="abc1234", commit_match=False, pinned=False,
        unpinned_reasons=["HEAD ffffffffffff is not the pinned abc1234"], allow_unpinned=True, cmake_flags=[],
        cuda_arch=None, host_notes=[], targets=["llama-server"], binaries={}, patches=[],
        version_text="version: 1 (abc1234)", expected_version=None, version_match=None, started_at="x",
        seconds=1.0, log="build.log")
    (fake_server_bin.parent / BUILD_RECORD).write_text(record.model_dump_json())
    out = tmp_path / "run"
    with open_session(plan_run(str(tiny_pack), options=RunOptions(out=out, server_bin=fake_server_bin))):
        pass
    r = _receipt(out)
    assert r["engine"]["unpinned_build"] is True
    assert "engine built unpinned: HEAD ffffffffffff is not the pinned abc1234" in r["claim"]["reasons"]


def _memory_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "servepack-memory"}


@pytest.mark.parametrize(("ending", "raised", "status"), [
    ("complete", None, "complete"), ("error", RuntimeError, "partial"), ("ctrl-c", KeyboardInterrupt, "partial"),
    ("launch fails", EngineError, "failed"),
])
def test_every_ending_stops_and_joins_the_memory_sampler(ending: str, raised: type[BaseException] | None, status: str,
                                                         tiny_pack: Path, fake_server_bin: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    before = _memory_threads()
    if ending == "launch fails":
        monkeypatch.setenv("FAKE_MODE", "die_early")
    out = tmp_path / "run"
    with pytest.raises(raised) if raised else contextlib.nullcontext():
        with open_session(plan_run(str(tiny_pack), options=RunOptions(out=out, server_bin=fake_server_bin))):
            assert len(_memory_threads() - before) == 1  # the session samples memory in a thread of its own
            if ending == "error":
                raise RuntimeError("boom")
            if ending == "ctrl-c":
                raise KeyboardInterrupt
    # joined, not merely told to stop: gone the moment the session has ended, whichever way it ended
    assert _memory_threads() - before == set()
    r = _receipt(out)
    assert r["status"] == status
    # it did run on the failed launch too: the first sample is taken before the launch
    assert json.loads((out / "memory_summary.json").read_text())["samples"] >= 1
