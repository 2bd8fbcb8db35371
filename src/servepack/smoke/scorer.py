"""Layered verdicts for one assistant message: extraction, strict schema, semantics (and code, via the sandbox).

The message is judged twice. The strict pass reads only native `tool_calls`, takes names as written and
arguments without coercion. The lenient pass is what a forgiving agent runtime does: a JSON call found in
`content` counts, "42" is read as 42 where the schema wants a number, a near-miss tool name is mapped to
the offered one. A strict finding whose code the lenient pass does not reproduce is marked `lenient_ok`.
Transport findings come from the client (see `transport_verdict`); stream mismatches from the runner.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError

from servepack.smoke.cases import (
    CallSpec,
    Case,
    ExpectCode,
    ExpectNoToolCall,
    ExpectToolCalls,
    lookup,
)
from servepack.smoke.result import Finding, Layer, Verdict

SCORER_VERSION = "1.1"

# The stable codes, by layer. Tests and reports rely on these names.
CODES: dict[str, Layer] = {
    "TRANSPORT_CONNECT": "transport",
    "TRANSPORT_TIMEOUT": "transport",
    "TRANSPORT_HTTP_ERROR": "transport",
    "TRANSPORT_TEMPLATE_ERROR": "transport",
    "TRANSPORT_BAD_RESPONSE": "transport",
    "TRANSPORT_TRUNCATED": "transport",
    "EXTRACTION_CALL_IN_CONTENT": "extraction",
    "EXTRACTION_ARGS_NOT_JSON": "extraction",
    "EXTRACTION_ARGS_NOT_OBJECT": "extraction",
    "EXTRACTION_NO_CODE": "extraction",
    "SCHEMA_TYPE": "schema",
    "SCHEMA_REQUIRED": "schema",
    "SCHEMA_ADDITIONAL_PROPERTY": "schema",
    "SCHEMA_ENUM": "schema",
    "SCHEMA_RANGE": "schema",
    "SCHEMA_FORMAT": "schema",
    "SCHEMA_INVALID": "schema",
    "SEM_NO_TOOL_CALL": "semantics",
    "SEM_INVENTED_TOOL": "semantics",
    "SEM_TOOL_NAME_NEAR_MISS": "semantics",
    "SEM_WRONG_TOOL": "semantics",
    "SEM_MISSING_CALL": "semantics",
    "SEM_EXTRA_CALL": "semantics",
    "SEM_ORDER": "semantics",
    "SEM_ARG_VALUE": "semantics",
    "SEM_ARG_CONSTRAINT": "semantics",
    "SEM_UNEXPECTED_TOOL_CALL": "semantics",
    "SEM_EMPTY_ANSWER": "semantics",
    "SEM_CONTENT_MISMATCH": "semantics",
    "SEM_FORBIDDEN_CONTENT": "semantics",
    "CODE_STDOUT_MISMATCH": "semantics",
    "CODE_ERROR": "sandbox",
    "CODE_TIMEOUT": "sandbox",
    "SANDBOX_REFUSED": "sandbox",
    "SANDBOX_UNAVAILABLE": "sandbox",
    "STREAM_MISMATCH": "stream",
}

_SCHEMA_CODES = {
    "type": "SCHEMA_TYPE",
    "required": "SCHEMA_REQUIRED",
    "additionalProperties": "SCHEMA_ADDITIONAL_PROPERTY",
    "unevaluatedProperties": "SCHEMA_ADDITIONAL_PROPERTY",
    "enum": "SCHEMA_ENUM",
    "const": "SCHEMA_ENUM",
    "minimum": "SCHEMA_RANGE",
    "maximum": "SCHEMA_RANGE",
    "exclusiveMinimum": "SCHEMA_RANGE",
    "exclusiveMaximum": "SCHEMA_RANGE",
    "minItems": "SCHEMA_RANGE",
    "maxItems": "SCHEMA_RANGE",
    "pattern": "SCHEMA_FORMAT",
    "minLength": "SCHEMA_FORMAT",
    "maxLength": "SCHEMA_FORMAT",
    "format": "SCHEMA_FORMAT",
}
_NEAR_MISS_RATIO = 0.8


def finding(code: str, message: str, *, lenient_ok: bool = False) -> Finding:
    return Finding(code=code, layer=CODES[code], message=message[:500], lenient_ok=lenient_ok)


@dataclass(frozen=True)
class Call:
    """One tool call as read from a message (arguments parsed, or None when unparsable)."""

    name: str
    arguments: Any
    raw_arguments: str


def _parse_args(raw: Any) -> tuple[Any, str | None]:
    """Parsed arguments and an extraction code when they are not a JSON object."""
    if isinstance(raw, dict):
        return raw, None
    if not isinstance(raw, str):
        return None, "EXTRACTION_ARGS_NOT_JSON"
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        return None, "EXTRACTION_ARGS_NOT_JSON"
    return (value, None) if isinstance(value, dict) else (None, "EXTRACTION_ARGS_NOT_OBJECT")


def native_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls") or []
    return [c for c in calls if isinstance(c, dict)]


_FENCE_RE = re.compile(r"```(?:json|tool_call|python)?\s*\n?(.*?)```", re.S)
_TAG_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)


def calls_in_content(content: str) -> list[dict[str, Any]]:
    """JSON tool calls written into text: bare, fenced, or in <tool_call> tags (Hermes/Qwen style)."""
    chunks = [m.group(1) for m in _TAG_RE.finditer(content)] + [m.group(1) for m in _FENCE_RE.finditer(content)]
    chunks.append(content)
    decoder = json.JSONDecoder()
    for chunk in chunks:
        found: list[dict[str, Any]] = []
        i = 0
        while True:
            start = min((p for p in (chunk.find("{", i), chunk.find("[", i)) if p >= 0), default=-1)
            if start < 0:
                break
            try:
                value, end = decoder.raw_decode(chunk, start)
            except json.JSONDecodeError:
                i = start + 1
                continue
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, dict):
                    call = _as_call_object(item)
                    if call is not None:
                        found.append(call)
            i = end
        if found:
            return found
    return []


def _as_call_object(obj: dict[str, Any]) -> dict[str, Any] | None:
    inner = obj.get("function")
    fn: dict[str, Any] = inner if isinstance(inner, dict) else obj
    name = fn.get("name")
    # Without an arguments key it is more likely data in an answer than a call.
    if not isinstance(name, str) or not name or not ({"arguments", "parameters"} & fn.keys()):
        return None
    args = fn.get("arguments", fn.get("parameters", {}))
    return {"name": name, "arguments": args}


def read_calls(message: dict[str, Any], *, lenient: bool) -> tuple[list[Call], list[Finding], bool]:
    """The calls of a message, extraction findings, and whether they came from content."""
    findings: list[Finding] = []
    raw_calls = [c.get("function") or {} for c in native_calls(message)]
    from_content = False
    if not raw_calls:
        content = message.get("content")
        leaked = calls_in_content(content) if isinstance(content, str) else []
        if leaked:
            if not lenient:
                findings.append(
                    finding("EXTRACTION_CALL_IN_CONTENT", f"tool call written into content: {leaked[0]['name']}")
                )
                return [], findings, True
            raw_calls, from_content = leaked, True
    calls: list[Call] = []
    for fn in raw_calls:
        raw = fn.get("arguments")
        args, code = _parse_args(raw)
        if code:
            findings.append(finding(code, f"{fn.get('name')}: arguments are not a JSON object: {str(raw)[:120]}"))
        calls.append(Call(str(fn.get("name") or ""), args, raw if isinstance(raw, str) else json.dumps(raw)))
    return calls, findings, from_content


def _norm(name: str) -> str:
    """A tool name without case, separators or a namespace prefix (`functions.set_timer` → `settimer`)."""
    return re.sub(r"[^a-z0-9]", "", name.lower().rsplit(".", 1)[-1])


def _resolve_name(name: str, offered: list[str], *, lenient: bool) -> tuple[str, Finding | None]:
    """The offered tool a name refers to; in strict mode only an exact name does."""
    if name in offered:
        return name, None
    by_norm = {_norm(o): o for o in offered}
    close = by_norm.get(_norm(name)) or next(iter(difflib.get_close_matches(name, offered, 1, _NEAR_MISS_RATIO)), None)
    if close and lenient:
        return close, None  # the strict pass has already recorded the near miss
    if close:
        return name, finding("SEM_TOOL_NAME_NEAR_MISS", f"{name!r} is not offered; near {close!r}")
    return name, finding("SEM_INVENTED_TOOL", f"{name!r} is not among the offered tools {offered}")


def coerce(value: Any, schema: dict[str, Any]) -> Any:
    """Lenient reading of strings as numbers/booleans where the schema asks for those types."""
    types = schema.get("type")
    wanted = set(types) if isinstance(types, list) else {types}
    if isinstance(value, str):
        text = value.strip()
        if "integer" in wanted and re.fullmatch(r"-?\d+", text):
            return int(text)
        if "number" in wanted and re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", text):
            return float(text) if any(ch in text for ch in ".eE") else int(text)
        if "boolean" in wanted and text.lower() in {"true", "false"}:
            return text.lower() == "true"
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        return {k: coerce(v, props[k]) if isinstance(props.get(k), dict) else v for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [coerce(v, schema["items"]) for v in value]
    return value


def schema_findings(args: Any, schema: dict[str, Any], *, where: str, sem: bool = False) -> list[Finding]:
    """Draft 2020-12 validation, no coercion; one finding per distinct failing keyword."""
    out: list[Finding] = []
    seen: set[str] = set()
    for err in sorted(Draft202012Validator(schema).iter_errors(args), key=_err_key):
        code = "SEM_ARG_CONSTRAINT" if sem else _SCHEMA_CODES.get(str(err.validator), "SCHEMA_INVALID")
        path = "/".join(str(p) for p in err.absolute_path) or "(arguments)"
        if f"{code}:{path}" in seen:
            continue
        seen.add(f"{code}:{path}")
        out.append(finding(code, f"{where}: {path}: {err.message}"))
    return out


def _err_key(err: SchemaError) -> str:
    return "/".join(str(p) for p in err.absolute_path)


def _check_call(case: Case, spec: CallSpec, call: Call, *, lenient: bool) -> list[Finding]:
    """Tool schema, the case's extra schema and value matchers for one matched call."""
    if call.arguments is None:
        return []  # already reported by extraction
    schema = case.tool_schema(call.name) or {"type": "object"}
    args = coerce(call.arguments, schema) if lenient else call.arguments
    out = schema_findings(args, schema, where=call.name)
    if spec.arguments_schema:
        out += schema_findings(args, spec.arguments_schema, where=call.name, sem=True)
    for path, matcher in spec.args.items():
        reason = matcher.check(lookup(args, path), lenient=lenient)
        if reason:
            out.append(finding("SEM_ARG_VALUE", f"{call.name}.{path}: {reason}"))
    return out


def _judge_calls(case: Case, expect: ExpectToolCalls, message: dict[str, Any], *, lenient: bool) -> list[Finding]:
    calls, out, _ = read_calls(message, lenient=lenient)
    offered = case.tool_names
    resolved: list[Call] = []
    for c in calls:
        name, f = _resolve_name(c.name, offered, lenient=lenient)
        if f:
            out.append(f)
        resolved.append(Call(name, c.arguments, c.raw_arguments))
    if not resolved:
        # A call leaked into content is already explained by its extraction finding.
        if not out:
            out.append(finding("SEM_NO_TOOL_CALL", f"expected a call to {expect.calls[0].name}; got none"))
        return out
    used: list[int] = []
    matched: list[int] = []  # indices of calls that matched an expected name, in expected order
    for spec in expect.calls:
        candidates = [i for i, c in enumerate(resolved) if c.name == spec.name and i not in used]
        if not candidates:
            others = [i for i, c in enumerate(resolved) if i not in used and c.name in offered]
            if others and len(resolved) <= len(expect.calls):
                used.append(others[0])
                out.append(finding("SEM_WRONG_TOOL", f"called {resolved[others[0]].name}, expected {spec.name}"))
            else:
                out.append(finding("SEM_MISSING_CALL", f"no call to {spec.name}"))
            continue
        checks = [(i, _check_call(case, spec, resolved[i], lenient=lenient)) for i in candidates]
        best = next(((i, fs) for i, fs in checks if not fs), checks[0])
        used.append(best[0])
        matched.append(best[0])
        out += best[1]
    if expect.ordered and matched != sorted(matched):
        out.append(finding("SEM_ORDER", f"calls came as {[c.name for c in resolved]}, expected in order"))
    extra = [c.name for i, c in enumerate(resolved) if i not in used]
    if extra and not (expect.allow_extra and all(n in offered for n in extra)):
        out.append(finding("SEM_EXTRA_CALL", f"unexpected further calls: {extra}"))
    return out


def _judge_no_call(case: Case, expect: ExpectNoToolCall, message: dict[str, Any], *, lenient: bool) -> list[Finding]:
    out: list[Finding] = []
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    attempted = [str((c.get("function") or {}).get("name")) for c in native_calls(message)]
    attempted = attempted or [c["name"] for c in calls_in_content(content or "")]
    for name in attempted:
        if name not in case.tool_names:
            out.append(finding("SEM_INVENTED_TOOL", f"called {name!r}, which is not offered"))
    if attempted:
        out.append(finding("SEM_UNEXPECTED_TOOL_CALL", f"expected an answer without tool calls; got {attempted}"))
        return out
    text = (content or "").strip()
    if not text:
        out.append(finding("SEM_EMPTY_ANSWER", "expected an answer; content is empty"))
        return out
    if expect.content_regex and not re.search(expect.content_regex, text):
        out.append(finding("SEM_CONTENT_MISMATCH", f"answer does not match /{expect.content_regex}/: {text[:160]!r}"))
    if expect.content_not_regex and re.search(expect.content_not_regex, text):
        out.append(finding("SEM_FORBIDDEN_CONTENT", f"answer matches forbidden /{expect.content_not_regex}/"))
    return out


_CODE_BLOCK_RE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.S)


def extract_code(content: str) -> str | None:
    """The first fenced code block, or the whole text when it reads as bare Python."""
    blocks = _CODE_BLOCK_RE.findall(content)
    if blocks:
        return str(blocks[0])
    if re.search(r"^\s*(def |import |from \S+ import |print\()", content, re.M):
        return content
    return None


@functools.lru_cache(maxsize=128)
def _run_code(code: str, timeout_s: float) -> tuple[str, str, int | None, bool, str | None]:
    from servepack.smoke.sandbox import run_python  # the sandbox lives in its own module (issue 4)

    res = run_python(code, timeout_s=timeout_s)
    return res.stdout, res.stderr, res.exit_code, res.timed_out, res.refused


def _judge_code(expect: ExpectCode, message: dict[str, Any], *, lenient: bool) -> list[Finding]:
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    code = extract_code(content or "")
    if code is None:
        called = [str((c.get("function") or {}).get("name")) for c in native_calls(message)]
        if called:
            return [finding("SEM_UNEXPECTED_TOOL_CALL", f"expected code in the answer; got calls {called}")]
        return [finding("EXTRACTION_NO_CODE", f"no code block in the answer: {(content or '')[:120]!r}")]
    program = code.rstrip() + "\n\n" + expect.driver
    try:
        stdout, stderr, exit_code, timed_out, refused = _run_code(program, expect.timeout_s)
    except ImportError as exc:
        return [finding("SANDBOX_UNAVAILABLE", f"code sandbox not importable: {exc}")]
    if refused:
        return [finding("SANDBOX_REFUSED", f"the sandbox would not run the code: {refused}")]
    if timed_out:
        return [finding("CODE_TIMEOUT", f"the code ran past {expect.timeout_s:g}s")]
    if exit_code != 0:
        tail = stderr.strip().splitlines()[-1:] or [""]
        return [finding("CODE_ERROR", f"exit {exit_code}: {tail[0][:200]}")]
    if stdout == expect.stdout:
        return []
    if lenient:
        # A forgiving reading: trailing blanks ignored, extra demo output before the expected lines tolerated.
        got = "\n".join(line.rstrip() for line in stdout.rstrip().splitlines())
        want = "\n".join(line.rstrip() for line in expect.stdout.rstrip().splitlines())
        if got == want or got.endswith("\n" + want):
            return []
    return [finding("CODE_STDOUT_MISMATCH", f"stdout {stdout[:160]!r}, expected {expect.stdout[:160]!r}")]


def _judge(case: Case, expect: Any, message: dict[str, Any], *, lenient: bool) -> list[Finding]:
    if isinstance(expect, ExpectToolCalls):
        return _judge_calls(case, expect, message, lenient=lenient)
    if isinstance(expect, ExpectNoToolCall):
        return _judge_no_call(case, expect, message, lenient=lenient)
    if isinstance(expect, ExpectCode):
        return _judge_code(expect, message, lenient=lenient)
    raise TypeError(f"unknown expectation {type(expect).__name__}")


def _verdict_for(case: Case, expect: Any, message: dict[str, Any]) -> Verdict:
    strict = _judge(case, expect, message, lenient=False)
    if not strict:
        return Verdict(strict_pass=True, lenient_pass=True, findings=[])
    lenient = _judge(case, expect, message, lenient=True)
    lenient_codes = {f.code for f in lenient}
    findings = [f.model_copy(update={"lenient_ok": f.code not in lenient_codes}) for f in strict]
    strict_codes = {f.code for f in strict}
    findings += [f for f in lenient if f.code not in strict_codes and not f.lenient_ok]
    return Verdict(strict_pass=False, lenient_pass=all(f.lenient_ok for f in findings), findings=findings)


def _rank(v: Verdict) -> tuple[int, int, int]:
    return (int(v.strict_pass), int(v.lenient_pass), -len(v.findings))


def score_message(case: Case, message: dict[str, Any], *, finish_reason: str | None = None) -> Verdict:
    """The verdict of one assistant message: the best over `expect` and `also_accept`."""
    verdicts = [_verdict_for(case, e, message) for e in (case.expect, *case.also_accept)]
    best = max(verdicts, key=_rank)
    if finish_reason == "length" and not best.strict_pass:
        extra = finding("TRANSPORT_TRUNCATED", "generation stopped at max_tokens")
        best = best.model_copy(update={"findings": [*best.findings, extra], "lenient_pass": False})
    return best


def transport_verdict(code: str, message: str) -> Verdict:
    """A failed exchange: nothing to judge beyond the transport finding."""
    return Verdict(strict_pass=False, lenient_pass=False, findings=[finding(code, message)])


def message_of(response: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The assistant message of a chat-completion body, a recorded attempt, or a bare message."""
    if isinstance(response.get("response"), dict):
        response = response["response"]
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        msg = choices[0].get("message") or {}
        return (msg if isinstance(msg, dict) else {}), choices[0].get("finish_reason")
    if isinstance(response.get("message"), dict):
        return response["message"], None
    return response, None
