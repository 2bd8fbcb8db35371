"""Item 6 of issue 11: secrets in preset flags never reach a results file; a bench refused everywhere is not
complete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servepack.errors import EngineError
from servepack.packs import load_pack
from servepack.pipeline.bench import bench_attach, bench_in_session
from servepack.plan import RunOptions, plan_run
from servepack.records.verify import verify_run
from servepack.redact import REDACTED
from servepack.report.measured import write_measured
from servepack.session import open_session
from servepack.testing import Reply, Script, ScriptedServer

SECRET = "sk-live-4f9a8b7c6d5e"
FILE_KEY = "sk-from-keyfile-0a1b2c"


def _with_flags(pack: Path, extra: str) -> Path:
    text = pack.read_text().replace('jinja = true\n', f'jinja = true\n{extra}\n', 1)
    pack.write_text(text)
    return pack


def test_api_key_and_key_files_are_redacted_in_every_file(tiny_pack: Path, fake_server_bin: Path,
                                                          tmp_path: Path) -> None:
    keyfile = tmp_path / "keys.txt"
    keyfile.write_text(FILE_KEY + "\n")
    pack = _with_flags(tiny_pack, f'api-key = "{SECRET}"\napi-key-file = "{keyfile}"\n'
                                  'ssl-key-file = "/etc/servepack-test/key.pem"')
    out = tmp_path / "run"
    # key and certificate files are host files the server reads: allowed here by name, as --allow-server-flag does
    with open_session(plan_run(str(pack), options=RunOptions(out=out, server_bin=fake_server_bin,
                                                             allow_flags={"read-files"}))):
        # The stand-in echoes its argv into server.log, as an engine might.
        assert SECRET in (out / "server.log").read_text()
    r = json.loads((out / "receipt.json").read_text())
    flags = r["preset"]["flags"]
    assert flags["api-key"] == REDACTED and flags["api-key-file"] == REDACTED and flags["ssl-key-file"] == REDACTED
    assert flags["ctx-size"] == 512 and flags["alias"] == "tiny" and flags["jinja"] is True
    argv = r["server"]["argv"]
    assert argv[argv.index("--api-key") + 1] == REDACTED and argv[argv.index("--alias") + 1] == "tiny"
    assert r["server"]["processes"][0]["argv"] == argv
    write_measured(out, load_pack(str(pack)).pack)
    for path in out.iterdir():
        data = path.read_bytes()
        for secret in (SECRET, FILE_KEY, "/etc/servepack-test/key.pem"):
            assert secret.encode() not in data, f"{secret} leaked into {path.name}"
    assert REDACTED in (out / "MEASURED.md").read_text()
    assert verify_run(out).ok  # the log was scrubbed before the receipt hashed it


def test_an_ordinary_preset_is_recorded_as_given(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path) -> None:
    pack = _with_flags(tiny_pack, 'override-kv = "tokenizer.ggml.add_bos_token=bool:false"')
    out = tmp_path / "run"
    with open_session(plan_run(str(pack), options=RunOptions(out=out, server_bin=fake_server_bin))):
        pass
    r = json.loads((out / "receipt.json").read_text())
    assert r["preset"]["flags"]["override-kv"] == "tokenizer.ggml.add_bos_token=bool:false"
    assert REDACTED not in json.dumps(r) and "tokenizer.ggml.add_bos_token" in (out / "server.log").read_text()


def _unauthorized(req: dict) -> Reply:  # type: ignore[type-arg]
    return Reply(401, {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}})


def _attach_pack(pack: Path, base_url: str) -> Path:
    text = pack.read_text()
    start, end = text.index("[engine]"), text.index("[hardware]")
    pack.write_text(text[:start] + f'[engine]\nname = "attach"\nrepo = "r"\nbase_url = "{base_url}/v1"\n'
                    'served_model = "m"\n' + text[end:])
    return pack


def test_a_bench_whose_every_request_got_401_ends_partial(tiny_pack: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with ScriptedServer(Script(respond=_unauthorized)) as srv:
        pack = _attach_pack(tiny_pack, srv.base_url)
        with pytest.raises(EngineError, match=r"every one of the 2 measured requests was refused with HTTP 401"):
            with open_session(plan_run(str(pack), options=RunOptions(out=out, kind="bench"))) as s:
                bench_in_session(s, lambda _: None, context_marks=(40,), gen_tokens=5, samples=2, warmup=0,
                                 concurrency=(1,))
    r = json.loads((out / "receipt.json").read_text())
    assert r["status"] == "partial" and "HTTP 401" in r["error"]
    assert any("HTTP 401" in reason for reason in r["claim"]["reasons"])
    assert (out / "server_bench.json").is_file() and verify_run(out).ok  # what was sent is kept and verifies


def test_attached_bench_refused_everywhere_is_an_error_not_a_result(tmp_path: Path) -> None:
    with ScriptedServer(Script(respond=_unauthorized)) as srv:
        with pytest.raises(EngineError, match=r"HTTP 401 \(not authorized\)"):
            bench_attach(srv.base_url, "m", pack_ref=None, out=tmp_path / "a", progress=lambda _: None,
                         context_marks=(40,), gen_tokens=5, samples=1, warmup=0)


def test_a_bench_with_some_failures_still_completes(tmp_path: Path) -> None:
    from collections import deque
    with ScriptedServer(Script(ttft_s=0.01, itl_s=0.002, modes=deque(["500"]))) as srv:
        summary, _ = bench_attach(srv.base_url, "m", pack_ref=None, out=tmp_path / "a", progress=lambda _: None,
                                  context_marks=(40,), gen_tokens=5, samples=3, warmup=0)
    cell = summary.cells[0]
    assert cell.n == 3 and cell.n_ok == 2 and len(cell.failures) == 1


def test_every_request_failing_with_500_is_named_too(tmp_path: Path) -> None:
    from collections import deque
    with ScriptedServer(Script(modes=deque(["500"] * 4))) as srv:
        with pytest.raises(EngineError, match=r"every one of the 2 measured requests failed; nothing was measured "
                                              r"\(first: HTTP 500"):
            bench_attach(srv.base_url, "m", pack_ref=None, out=tmp_path / "a", progress=lambda _: None,
                         context_marks=(40,), gen_tokens=5, samples=2, warmup=0)


def test_an_engine_error_quoting_its_log_shows_no_secret(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "die_early")  # the stand-in prints its argv, then dies before /health
    pack = _with_flags(tiny_pack, f'api-key = "{SECRET}"')
    out = tmp_path / "run"
    with pytest.raises(EngineError, match=r"exited with code 3 before it was healthy") as info:
        with open_session(plan_run(str(pack), options=RunOptions(out=out, server_bin=fake_server_bin))):
            pytest.fail("must not start")
    assert SECRET not in str(info.value) and REDACTED in str(info.value)
    for path in out.iterdir():
        assert SECRET.encode() not in path.read_bytes(), path.name
