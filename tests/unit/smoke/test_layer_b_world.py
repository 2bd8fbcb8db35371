"""Layer B's world and tools: files confined to the workspace, scripted web/browser, memory, cron, shell."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from servepack.smoke.layer_b.cases import WorldSpec
from servepack.smoke.layer_b.tools import DEFAULT_SHELL, execute
from servepack.smoke.layer_b.world import ToolError, World, check_cron

PAGES = [
    {"url": "https://a.example/", "title": "Alpha home", "content": "Alpha sells widgets.",
     "elements": [{"ref": "e1", "kind": "input", "label": "Email", "form": "f", "name": "email"},
                  {"ref": "e2", "kind": "button", "label": "Go", "form": "f", "href": "https://a.example/done"},
                  {"ref": "e3", "kind": "link", "label": "About", "href": "https://a.example/about"}]},
    {"url": "https://a.example/done", "title": "Done", "content": "Thanks."},
    {"url": "https://a.example/about", "title": "About alpha widgets", "content": "Founded in 1999."},
]  # fmt: skip


@pytest.fixture
def world() -> Iterator[World]:
    spec = WorldSpec.model_validate(
        {"files": {"a.txt": "one\ntwo\nthree\n", "sub/b.py": "x = 1\nx = 2\n"}, "pages": PAGES, "memory": ["likes tea"]}
    )
    w = World.create(spec, default_shell=DEFAULT_SHELL)
    yield w
    w.close()


def test_files_read_write_patch(world: World) -> None:
    assert world.read_file("a.txt", offset=2, limit=1) == "two\n"
    assert world.write_file("new/c.txt", "hi") == "wrote 2 bytes to new/c.txt"
    assert (world.workspace / "new/c.txt").read_text() == "hi"
    with pytest.raises(ToolError, match="occurs 2 times"):
        world.patch("sub/b.py", "x = ", "y = ")
    assert world.patch("sub/b.py", "x = ", "y = ", replace_all=True).endswith("2 replacement(s)")
    with pytest.raises(ToolError, match="not found"):
        world.patch("sub/b.py", "zzz", "q")
    with pytest.raises(ToolError, match="no such file"):
        world.read_file("missing.txt")


@pytest.mark.parametrize("path", ["/etc/passwd", "../escape.txt", "sub/../../x", "~/.bashrc"])
def test_paths_outside_the_workspace_are_refused_and_flagged(world: World, path: str) -> None:
    outcome = execute(world, "write_file", {"path": path, "content": "x"}, step=0)
    assert not outcome.ok and "outside the workspace" in outcome.text
    assert world.events[-1].flags == ("outside_workspace",)
    assert not (world.workspace.parent / "escape.txt").exists()


def test_symlink_escape_is_refused(world: World) -> None:
    (world.workspace / "link").symlink_to("/etc")
    with pytest.raises(ToolError, match="outside the workspace"):
        world.read_file("link/passwd")


def test_search_files_by_content_and_name(world: World) -> None:
    assert world.search_files("^x = 2$") == "sub/b.py:2:x = 2"
    assert world.search_files("*.py", target="files") == "sub/b.py"
    with pytest.raises(ToolError, match="regular expression"):
        world.search_files("(")


def test_web_search_ranks_by_overlap_and_extract_marks_visited(world: World) -> None:
    results = world.web_search("alpha widgets founded when")
    assert [r["url"] for r in results] == ["https://a.example/about", "https://a.example/"]
    out = json.loads(execute(world, "web_extract", {"urls": ["https://a.example/about", "https://nope/"]}, step=0).text)
    assert out["results"][0]["content"] == "Founded in 1999."
    assert "404" in out["results"][1]["error"]
    assert world.visited == {"https://a.example/about"}


def test_browser_type_click_submits_the_form(world: World) -> None:
    snap = world.navigate("https://a.example/")
    assert "[e1] input 'Email'" in snap and "[e3] link 'About'" in snap
    world.type_text("e1", "me@x.example")
    assert world.click("e2").startswith("URL: https://a.example/done")
    assert [(s.form, s.fields) for s in world.submissions] == [("f", {"email": "me@x.example"})]
    with pytest.raises(ToolError, match="no element"):
        world.click("e9")


def test_memory_add_replace_remove(world: World) -> None:
    world.memory_op("add", "prefers metric", None)
    world.memory_op("replace", "likes coffee", "tea")
    assert world.memory == ["likes coffee", "prefers metric"]
    world.memory_op("remove", None, "metric")
    assert world.memory == ["likes coffee"]
    with pytest.raises(ToolError, match="matches 0 entries"):
        world.memory_op("remove", None, "nothing")


@pytest.mark.parametrize("schedule", ["30 7 * * *", "*/15 * * * 1-5", "0 0 1,15 * *"])
def test_valid_cron(schedule: str) -> None:
    check_cron(schedule)


@pytest.mark.parametrize(
    ("schedule", "why"), [("0 25 * * *", "out of range"), ("daily", "5 fields"), ("a * * * *", "syntax")]
)
def test_invalid_cron(schedule: str, why: str) -> None:
    with pytest.raises(ToolError, match=why):
        check_cron(schedule)


def test_cron_create_list_remove(world: World) -> None:
    assert world.cron_op("create", "0  9 * * 1", "report", None, None) == "created job-1: 0 9 * * 1 'report'"
    assert world.cron_op("list", None, None, None, None) == "job-1: 0 9 * * 1 'report'"
    world.cron_op("remove", None, None, None, "job-1")
    assert world.cron == []


def test_terminal_runs_in_the_workspace_and_flags_destructive(world: World) -> None:
    out = json.loads(execute(world, "terminal", {"command": "grep -c o a.txt"}, step=0).text)
    assert out == {"exit_code": 0, "stdout": "2\n", "stderr": ""}
    execute(world, "terminal", {"command": "rm -rf sub"}, step=1)
    assert world.events[-1].flags == ("destructive",)
    assert not (world.workspace / "sub").exists()
    refused = execute(world, "terminal", {"command": "curl http://127.0.0.1/"}, step=2)
    assert not refused.ok and "not allowed" in refused.text and "refused" in world.events[-1].flags


def test_terminal_filling_the_disk_quota_is_reported_and_judged(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servepack.smoke import sandbox
    from servepack.smoke.layer_b.cases import Expect
    from servepack.smoke.layer_b.judge import _event_findings

    monkeypatch.setattr(sandbox, "DISK_QUOTA_BYTES", 1024 * 1024)
    world.shell_allowed = (*DEFAULT_SHELL, "yes")
    outcome = execute(world, "terminal", {"command": "yes > big"}, step=0)
    body = json.loads(outcome.text)
    assert not outcome.ok and body["disk"] == "the workspace's disk quota (1048576 bytes) is full"
    assert "No space left on device" in body["stderr"] and world.events[-1].flags == ("disk_quota",)
    assert 0 < (world.workspace / "big").stat().st_size <= 1024 * 1024
    findings = _event_findings(world, Expect())
    assert [(f.code, f.lenient_ok) for f in findings] == [("SANDBOX_DISK_QUOTA", True)]
    full = execute(world, "terminal", {"command": "echo small > s.txt"}, step=1)
    assert not full.ok and "disk" in json.loads(full.text)  # still full: the quota holds across calls
    fine = execute(world, "terminal", {"command": "rm big; echo small > s.txt"}, step=2)
    assert fine.ok and "disk" not in json.loads(fine.text) and world.events[-1].flags == ()
    assert (world.workspace / "s.txt").read_text() == "small\n" and not (world.workspace / "big").exists()
