"""The pull and twin commands end to end against the loopback Hub stand-in (click's runner, real hf client)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from weights_fake_hub import FakeHub, FakeRepo, running_hub, tiny_gguf, write_pack

from servepack.cli.main import cli
from servepack.weights.gguf import read_header
from servepack.weights.twin import is_twin

REPO, FILE, COMMIT = "acme/Tiny-GGUF", "tiny.gguf", "c" * 40
DATA = tiny_gguf()
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    with running_hub(monkeypatch, tmp_path / "hf-cache", {REPO: FakeRepo(COMMIT, {FILE: DATA})}) as h:
        yield h


def test_pull_command_exit_codes(hub: FakeHub, tmp_path: Path) -> None:
    good = write_pack(tmp_path / "good.toml", repo=REPO, file=FILE, revision=COMMIT, sha256=SHA)
    r = CliRunner().invoke(cli, ["pull", str(good), "--local-dir", str(tmp_path / "m"), "--json"])
    assert r.exit_code == 0, r.output
    body = json.loads(r.stdout)
    assert body["files"][0]["sha256"] == SHA and body["files"][0]["claimable"] is True
    bad = write_pack(tmp_path / "bad.toml", repo=REPO, file=FILE, revision=COMMIT, sha256="f" * 64)
    r = CliRunner().invoke(cli, ["pull", str(bad), "--local-dir", str(tmp_path / "n")])
    assert r.exit_code == 1
    assert "servepack: error: " in r.stderr and SHA in r.stderr and "f" * 64 in r.stderr


def test_twin_header_only_fetches_a_prefix_and_writes_a_marked_twin(hub: FakeHub, tmp_path: Path) -> None:
    pack = write_pack(tmp_path / "p.toml", repo=REPO, file=FILE, revision=COMMIT, sha256=SHA)
    header, out = tmp_path / "tiny.header", tmp_path / "tiny-twin.gguf"
    r = CliRunner().invoke(cli, ["twin", str(header), str(out), "--header-only", "--pack", str(pack), "--seed", "3"])
    assert r.exit_code == 0, r.output
    offset = read_header(header).data_offset
    assert header.read_bytes() == DATA[:offset]
    assert out.stat().st_size == len(DATA) and out.read_bytes()[:offset] == DATA[:offset]
    assert is_twin(out)
    mark = json.loads(out.with_name(out.name + ".twin.json").read_text())
    assert mark["source"] == f"hf://{REPO}@{COMMIT}/{FILE}"
    assert hub.gets(FILE) == ["bytes=0-1048575"], "only the header range is asked for"
