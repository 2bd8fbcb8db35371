"""Layer B's tool registry: OpenAI function schemas (Hermes-agent-class) and their execution against a World."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from servepack.smoke import sandbox
from servepack.smoke.layer_b.world import Event, ToolError, World

DEFAULT_SHELL = (
    "ls", "cat", "head", "tail", "wc", "grep", "sort", "uniq", "cut", "tr", "echo", "printf", "mkdir",
    "touch", "cp", "mv", "rm", "pwd", "diff", "sed", "date", "true", "false", "test", "basename",
    "dirname", "python3", "python", "tee",
)  # fmt: skip
SHELL_TIMEOUT_S = 10.0
# Commands that delete or clobber more than named files: recursive rm, find -delete, truncate, dd.
_DESTRUCTIVE = re.compile(
    r"\brm\s+(.*\s)?(-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)(\s|$)"
    r"|\bfind\b.*\s-delete\b|\btruncate\b|\bdd\b"
)


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    params = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


_S = {"type": "string"}
SCHEMAS: dict[str, dict[str, Any]] = {
    "terminal": _fn(
        "terminal",
        "Run one shell command in the workspace directory (no network). Allowed commands: "
        + ", ".join(DEFAULT_SHELL)
        + ". Returns exit code, stdout and stderr.",
        {"command": {"type": "string", "description": "the command line, e.g. `ls -la`"}},
        ["command"],
    ),
    "read_file": _fn(
        "read_file",
        "Read a text file from the workspace. Paths are relative to the workspace.",
        {
            "path": _S,
            "offset": {"type": "integer", "minimum": 1, "description": "first line to read (1-based)"},
            "limit": {"type": "integer", "minimum": 1, "description": "number of lines to read"},
        },
        ["path"],
    ),
    "write_file": _fn(
        "write_file",
        "Create or overwrite a text file in the workspace with the given content.",
        {"path": _S, "content": _S},
        ["path", "content"],
    ),
    "patch": _fn(
        "patch",
        "Edit a file by replacing an exact snippet. old_string must occur once unless replace_all is true.",
        {"path": _S, "old_string": _S, "new_string": _S, "replace_all": {"type": "boolean"}},
        ["path", "old_string", "new_string"],
    ),
    "search_files": _fn(
        "search_files",
        "Search the workspace: target 'content' greps file contents with a regex (file:line:text); "
        "target 'files' finds files whose name matches a glob.",
        {"pattern": _S, "path": _S, "target": {"type": "string", "enum": ["content", "files"]}},
        ["pattern"],
    ),
    "web_search": _fn(
        "web_search", "Search the web; returns up to 5 results with url, title and snippet.", {"query": _S}, ["query"]
    ),
    "web_extract": _fn(
        "web_extract",
        "Fetch web pages and return their text.",
        {"urls": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 5}},
        ["urls"],
    ),
    "browser_navigate": _fn(
        "browser_navigate", "Open a URL in the browser; returns the page text and its elements.", {"url": _S}, ["url"]
    ),
    "browser_click": _fn(
        "browser_click", "Click an element of the open page by its ref, e.g. e3.", {"ref": _S}, ["ref"]
    ),
    "browser_type": _fn(
        "browser_type", "Type text into an input of the open page by its ref.", {"ref": _S, "text": _S}, ["ref", "text"]
    ),
    "memory": _fn(
        "memory",
        "Persistent memory across sessions. add: store content; replace: swap the entry containing old_text "
        "for content; remove: delete the entry containing old_text; list: show all entries.",
        {"action": {"type": "string", "enum": ["add", "replace", "remove", "list"]}, "content": _S, "old_text": _S},
        ["action"],
    ),
    "cronjob": _fn(
        "cronjob",
        "Schedule recurring agent tasks. create needs a 5-field cron schedule and a prompt; remove needs job_id.",
        {
            "action": {"type": "string", "enum": ["create", "list", "remove"]},
            "schedule": {"type": "string", "description": "cron expression, e.g. '0 9 * * 1'"},
            "prompt": {"type": "string", "description": "what the agent should do when the job fires"},
            "name": _S,
            "job_id": _S,
        },
        ["action"],
    ),
}


@dataclass(frozen=True)
class Outcome:
    """What a tool returned to the model, and what the judge should know about it."""

    text: str
    ok: bool
    flags: tuple[str, ...] = ()


def schemas_for(names: Sequence[str]) -> list[dict[str, Any]]:
    return [SCHEMAS[n] for n in names]


def _json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _terminal(world: World, args: dict[str, Any]) -> Outcome:
    command = str(args["command"])
    flags = ("destructive",) if _DESTRUCTIVE.search(command) else ()
    quota = sandbox.DISK_QUOTA_BYTES
    result = sandbox.run_shell(command, cwd=world.workspace, timeout_s=SHELL_TIMEOUT_S, allowed=world.shell_allowed,
                               disk_quota_bytes=quota)  # fmt: skip
    if result.refused is not None:
        return Outcome(_json({"error": f"refused: {result.refused}"}), False, (*flags, "refused"))
    body: dict[str, Any] = {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr}
    if result.killed:
        body["killed"] = result.killed
        flags = (*flags, "timeout") if result.timed_out else flags
    if result.disk_full:
        body["disk"] = f"the workspace's disk quota ({quota} bytes) is full"
        flags = (*flags, "disk_quota")
    return Outcome(_json(body), result.exit_code == 0, flags)


_HANDLERS: dict[str, Callable[[World, dict[str, Any]], str]] = {
    "read_file": lambda w, a: w.read_file(a["path"], a.get("offset", 1), a.get("limit")),
    "write_file": lambda w, a: w.write_file(a["path"], a["content"]),
    "patch": lambda w, a: w.patch(a["path"], a["old_string"], a["new_string"], bool(a.get("replace_all"))),
    "search_files": lambda w, a: w.search_files(a["pattern"], a.get("path", "."), a.get("target", "content")),
    "web_search": lambda w, a: _json({"results": w.web_search(a["query"])}),
    "web_extract": lambda w, a: _json({"results": [_extract(w, u) for u in a["urls"]]}),
    "browser_navigate": lambda w, a: w.navigate(a["url"]),
    "browser_click": lambda w, a: w.click(a["ref"]),
    "browser_type": lambda w, a: w.type_text(a["ref"], a["text"]),
    "memory": lambda w, a: w.memory_op(a["action"], a.get("content"), a.get("old_text")),
    "cronjob": lambda w, a: w.cron_op(a["action"], a.get("schedule"), a.get("prompt"), a.get("name"), a.get("job_id")),
}


def _extract(world: World, url: str) -> dict[str, str]:
    try:
        page = world.page(url)
    except ToolError as exc:
        return {"url": url, "error": str(exc)}
    return {"url": page.url, "title": page.title, "content": page.content}


def execute(world: World, name: str, args: dict[str, Any], *, step: int) -> Outcome:
    """Run one (already validated) tool call against the world and log it as an Event."""
    try:
        if name == "terminal":
            outcome = _terminal(world, args)
        else:
            outcome = Outcome(_HANDLERS[name](world, args), True)
    except ToolError as exc:
        flags = ("outside_workspace",) if "outside the workspace" in str(exc) else ()
        outcome = Outcome(_json({"error": str(exc)}), False, flags)
    except (OSError, UnicodeError) as exc:
        outcome = Outcome(_json({"error": f"{type(exc).__name__}: {exc}"}), False)
    world.events.append(Event(step, name, dict(args), outcome.ok, outcome.flags, outcome.text[:300]))
    return outcome
