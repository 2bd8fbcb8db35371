"""A model that plants links through the terminal cannot make host-side tools or the judge read through them.

Runs in the sandbox mode this host picks (the test asserts and prints it; `namespaces` here). The model's
python3 creates links to a host secret in tmp_path, to /proc/self/environ (where the runner holds a fake
HF_TOKEN) and to a host directory; the sandbox writes them back into the workspace as links, and every
host-side reader must refuse them: read_file, patch, write_file, search_files, the end-state judge and
the end-state snapshot.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servepack.smoke import sandbox
from servepack.smoke.layer_b.cases import LayerBCase, WorldSpec
from servepack.smoke.layer_b.episode import Episode
from servepack.smoke.layer_b.judge import end_state, judge
from servepack.smoke.layer_b.tools import DEFAULT_SHELL, execute
from servepack.smoke.layer_b.world import World

FAKE_TOKEN = "hf_FAKE" + uuid.uuid4().hex


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[World, Path]]:
    """A world whose workspace holds links the model made with the terminal tool."""
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET " + FAKE_TOKEN)
    world = World.create(WorldSpec.model_validate({"files": {"notes/v2.txt": "version two\n"}}),
                         default_shell=DEFAULT_SHELL)  # fmt: skip
    links = {"leak": str(secret), "env": "/proc/self/environ", "hostdir": str(tmp_path),
             "climb": "../" * 12 + str(secret).lstrip("/"), "latest": "notes/v2.txt"}  # fmt: skip
    code = "import os; " + "; ".join(f"os.symlink({t!r}, {n!r})" for n, t in links.items())
    outcome = execute(world, "terminal", {"command": f'python3 -c "{code}"'}, step=0)
    assert json.loads(outcome.text)["exit_code"] == 0, outcome.text
    print(f"sandbox mode: {sandbox.isolation().mode}")
    assert sandbox.isolation().mode in ("namespaces", "bwrap")
    yield world, secret
    world.close()


def _leaks(text: str) -> bool:
    return "TOPSECRET" in text or FAKE_TOKEN in text or "HF_TOKEN" in text


@pytest.mark.parametrize("path", ["leak", "env", "hostdir/secret.txt", "climb"])
def test_read_and_patch_refuse_links_out(planted: tuple[World, Path], path: str) -> None:
    world, _ = planted
    for name, args in (("read_file", {"path": path}), ("patch", {"path": path, "old_string": "T", "new_string": "x"})):
        outcome = execute(world, name, args, step=1)
        assert not outcome.ok and "outside the workspace" in outcome.text and not _leaks(outcome.text)
        assert world.events[-1].flags == ("outside_workspace",)


@pytest.mark.parametrize("path", ["leak", "hostdir/new.txt", "env"])
def test_write_refuses_links_out(planted: tuple[World, Path], path: str) -> None:
    world, secret = planted
    outcome = execute(world, "write_file", {"path": path, "content": "overwritten"}, step=1)
    assert not outcome.ok and "outside the workspace" in outcome.text
    assert secret.read_text().startswith("TOPSECRET") and not (secret.parent / "new.txt").exists()


def test_search_never_reads_through_links(planted: tuple[World, Path]) -> None:
    world, _ = planted
    for pattern in ("TOPSECRET", "HF_TOKEN", FAKE_TOKEN, "."):
        text = execute(world, "search_files", {"pattern": pattern}, step=1).text
        assert not _leaks(text)
    assert world.search_files("version") == "notes/v2.txt:1:version two"
    assert world.search_files("*.txt", target="files") == "notes/v2.txt"
    refused = execute(world, "search_files", {"pattern": ".", "path": "hostdir"}, step=2)
    assert not refused.ok and "outside the workspace" in refused.text


def test_in_workspace_link_is_still_readable(planted: tuple[World, Path]) -> None:
    world, _ = planted
    assert execute(world, "read_file", {"path": "latest"}, step=1).text == "version two\n"


def _case(files: list[dict[str, Any]]) -> LayerBCase:
    return LayerBCase.model_validate({
        "id": "links", "suite": "layer_b", "category": "files", "version": "3",
        "rationale": "judge must not read through links", "tools": ["terminal", "read_file"],
        "messages": [{"role": "user", "content": "x"}], "expect": {"files": files},
        "golden": [{"content": "done"}],
    })  # fmt: skip


def test_judge_and_snapshot_do_not_read_through_links(planted: tuple[World, Path]) -> None:
    world, secret = planted
    case = _case([{"path": "leak", "contains": ["TOPSECRET"]}, {"path": "env", "contains": ["HF_TOKEN"]},
                  {"path": "hostdir/secret.txt", "regex": "."}])  # fmt: skip
    verdict = judge(case, world, Episode(messages=[], final_answer="done"))
    missing = [f for f in verdict.findings if f.code == "END_FILE_MISSING"]
    assert len(missing) == 3 and all("outside the workspace" in f.message for f in missing)
    assert not any(_leaks(f.message) for f in verdict.findings)
    snapshot = end_state(world)
    assert snapshot["files"] == {"notes/v2.txt": "version two\n"}
    assert snapshot["links"]["leak"] == str(secret) and snapshot["links"]["env"] == "/proc/self/environ"
    assert not _leaks(json.dumps(snapshot))


def test_judge_reads_a_real_file_in_other_words(planted: tuple[World, Path]) -> None:
    world, _ = planted
    case = _case([{"path": "latest", "contains": ["two"]}, {"path": "notes/v2.txt", "equals": "version two"},
                  {"path": "gone.txt", "exists": False}])  # fmt: skip
    verdict = judge(case, world, Episode(messages=[], final_answer="ok"))
    assert [f.code for f in verdict.findings if f.code.startswith("END_")] == []


def test_files_spec_paths_must_be_plain() -> None:
    for bad in ("../x", "/etc/passwd", "a/../../b", "a//b", "", "./c"):
        with pytest.raises(ValueError, match="give a relative path of plain names"):
            WorldSpec.model_validate({"files": {bad: "x"}})
        with pytest.raises(ValueError, match="give a relative path of plain names"):
            _case([{"path": bad}])
    assert WorldSpec.model_validate({"files": {"a/b.txt": "x", "c d": "y"}}).files["c d"] == "y"
