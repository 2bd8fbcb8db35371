"""Reading a message: native tool calls (wire format checked), calls leaked into content, names, code blocks.

The scorer judges what these functions read; the executed suite (layer_b) reads content calls the same way.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from servepack.smoke.codes import finding
from servepack.smoke.result import Finding


@dataclass(frozen=True)
class Call:
    """One tool call as read from a message (arguments parsed, or None when unparsable)."""

    name: str
    arguments: Any
    raw_arguments: str


def _parse_args(raw: Any, *, lenient: bool) -> tuple[Any, str | None]:
    """Parsed arguments (None when unusable) and an extraction code when they break the wire format."""
    if isinstance(raw, dict):
        return raw, None if lenient else "EXTRACTION_ARGS_NOT_STRING"
    if not isinstance(raw, str):
        return None, "EXTRACTION_ARGS_NOT_JSON"
    if not raw.strip():
        return {}, None if lenient else "EXTRACTION_ARGS_EMPTY"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return None, "EXTRACTION_ARGS_NOT_JSON"
    return (value, None) if isinstance(value, dict) else (None, "EXTRACTION_ARGS_NOT_OBJECT")


def native_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls") or []
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


_TAG_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n`]*\n(.*?)```", re.S)
_CALL_FENCE_LANGS = {"", "json", "tool_call", "tool_calls", "jsonc"}


def _decode_all(text: str) -> list[Any] | None:
    """Every JSON value in `text` when it holds nothing else (whitespace and commas between), else None."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n:
            break
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return None
        values.append(value)
    return values


def _calls_from_values(values: list[Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            call = _as_call_object(item) if isinstance(item, dict) else None
            if call is not None:
                found.append(call)
    return found


def calls_in_content(content: str) -> list[dict[str, Any]]:
    """Tool calls written into text, only where the text *is* the call(s), not prose quoting an example.

    Read: every `<tool_call>` block (Hermes/Qwen style; several blocks are several calls); else fenced JSON
    blocks, when outside them there is at most one short lead-in line; else JSON that runs to the end of
    the text after at most such a line. JSON with prose after it, or after a paragraph, is an example.
    """
    tags = _TAG_RE.findall(content)
    if tags:
        return _calls_from_values([v for t in tags for v in (_decode_all(t.strip()) or [])])
    fences = _FENCE_RE.findall(content)
    if fences:
        if not _lead_in_only(_FENCE_RE.sub("", content)):
            return []
        bodies = [body for lang, body in fences if lang.lower() in _CALL_FENCE_LANGS]
        return _calls_from_values([v for b in bodies for v in (_decode_all(b.strip()) or [])])
    start = re.search(r"^[ \t]*[\[{]", content, re.M)
    if start is None or not _lead_in_only(content[: start.start()]):
        return []
    return _calls_from_values(_decode_all(content[start.start() :].strip()) or [])


def _lead_in_only(text: str) -> bool:
    """At most one short line of text ("Calling the tool:"), which does not make the rest prose."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return len(lines) <= 1 and all(len(ln) <= 100 for ln in lines)


def _as_call_object(obj: dict[str, Any]) -> dict[str, Any] | None:
    inner = obj.get("function")
    fn: dict[str, Any] = inner if isinstance(inner, dict) else obj
    name = fn.get("name")
    # Without an arguments key it is more likely data in an answer than a call.
    if not isinstance(name, str) or not name or not ({"arguments", "parameters"} & fn.keys()):
        return None
    args = fn.get("arguments", fn.get("parameters", {}))
    return {"name": name, "arguments": args}


def _native_functions(message: dict[str, Any], *, lenient: bool) -> tuple[list[dict[str, Any]], list[Finding]]:
    """The `function` objects of native calls, and shape findings (a missing name fails lenient too)."""
    out: list[dict[str, Any]] = []
    findings: list[Finding] = []
    for c in native_calls(message):
        fn = c.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            findings.append(finding("EXTRACTION_CALL_SHAPE", f"a tool call without a function name: {str(c)[:120]}"))
            continue
        if c.get("type") != "function" and not lenient:
            what = f"{fn['name']}: type is {c.get('type')!r}, not 'function'"
            findings.append(finding("EXTRACTION_CALL_SHAPE", what))
        out.append(fn)
    return out, findings


def read_calls(message: dict[str, Any], *, lenient: bool) -> tuple[list[Call], list[Finding], bool]:
    """The calls of a message, extraction findings, and whether they came from content."""
    raw_calls, findings = _native_functions(message, lenient=lenient)
    from_content = False
    if not raw_calls and not findings:
        content = message.get("content")
        leaked = calls_in_content(content) if isinstance(content, str) else []
        if leaked:
            if not lenient:
                names = ", ".join(c["name"] for c in leaked)
                findings.append(finding("EXTRACTION_CALL_IN_CONTENT", f"tool call(s) written into content: {names}"))
                return [], findings, True
            raw_calls, from_content = leaked, True
    calls: list[Call] = []
    for fn in raw_calls:
        raw = fn.get("arguments")
        args, code = _parse_args(raw, lenient=lenient)
        if code:
            findings.append(finding(code, f"{fn.get('name')}: arguments break the wire format: {str(raw)[:120]!r}"))
        calls.append(Call(str(fn.get("name") or ""), args, raw if isinstance(raw, str) else json.dumps(raw)))
    return calls, findings, from_content


def _words(name: str) -> list[str]:
    """The words of a tool name without namespace, case or separators (`functions.setTimer` → set, timer)."""
    base = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name.rsplit(".", 1)[-1])
    return [w for w in re.split(r"[^a-z0-9]+", base.lower()) if w]


def _one_edit(a: str, b: str) -> bool:
    """a and b differ by at most one insertion, deletion, substitution or adjacent swap."""
    if a == b:
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return a[i + 1 :] == b[i + 1 :] or a[i:] == b[i + 1 :] or a[i + 1 :] == b[i:] or (
        a[i : i + 2] == b[i : i + 2][::-1] and a[i + 2 :] == b[i + 2 :]
    )


def near_miss(name: str, offered: list[str]) -> str | None:
    """The one offered tool `name` misspells, or None (a different first word is a different tool)."""
    words = _words(name)
    if not words:
        return None
    same = [o for o in offered if _words(o) == words or "".join(_words(o)) == "".join(words)]
    if len(same) == 1:
        return same[0]
    rest = "".join(words[1:])
    typo = [o for o in offered if _words(o)[:1] == words[:1] and len(rest) >= 4
            and _one_edit(rest, "".join(_words(o)[1:]))]
    return typo[0] if len(typo) == 1 else None


_CODE_FENCE_RE = re.compile(r"```[ \t]*([^\n`]*)\n(.*?)```", re.S)
_OPEN_FENCE_RE = re.compile(r"```[ \t]*([^\n`]*)\n(.*)$", re.S)
_PYTHON_LANGS = {"", "python", "py", "python3", "py3", "python3.11", "python3.12"}


def _is_python(lang: str) -> bool:
    words = lang.strip().lower().lstrip("{.").split()
    return (words[0] if words else "") in _PYTHON_LANGS


def extract_code(content: str) -> str | None:
    """The first fenced Python block (any capitalisation of the tag, or none); else bare Python; else None.

    A reply with fences but no Python fence holds no Python code; an unclosed fence (a cut reply) counts
    from its opening line on. The text around fences is never executed.
    """
    blocks = _CODE_FENCE_RE.findall(content)
    if blocks:
        python = [body for lang, body in blocks if _is_python(lang)]
        return str(python[0]) if python else None
    unclosed = _OPEN_FENCE_RE.search(content)
    if unclosed:
        return str(unclosed.group(2)) if _is_python(unclosed.group(1)) else None
    if re.search(r"^\s*(def |import |from \S+ import |print\()", content, re.M):
        return content
    return None
