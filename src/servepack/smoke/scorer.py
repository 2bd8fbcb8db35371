"""Layered verdicts for one assistant message: extraction, strict schema, semantics (and code, via the sandbox).

The message is judged twice. The strict pass is the OpenAI wire format exactly: only native `tool_calls`,
each `{"type": "function", "function": {"name", "arguments"}}` with `arguments` a JSON *string* that parses
to an object, names as offered, JSON types exact (25.0 is not an integer, "42" not a number), no keys the
schema forbids. The lenient pass is what a forgiving agent runtime does, and forgives only `LENIENT_FORGIVES`.
A strict finding whose code the lenient pass does not reproduce is marked `lenient_ok`. A response cut at
max_tokens never passes. Transport findings come from the client; stream mismatches from the runner; every
code and its meaning is in `smoke.codes`.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError as SchemaError

from servepack.errors import UsageError
from servepack.smoke.cases import (
    CallSpec,
    Case,
    ExpectCode,
    ExpectNoToolCall,
    ExpectToolCalls,
    lookup,
)
from servepack.smoke.client import body_message, body_problem, error_code_of
from servepack.smoke.codes import CODES, finding
from servepack.smoke.extract import Call, calls_in_content, extract_code, native_calls, near_miss, read_calls
from servepack.smoke.result import Finding, Verdict

SCORER_VERSION = "2.1"  # 2.1: a failed verdict also carries the rubric of the response's own kind

__all__ = ["CODES", "LENIENT_FORGIVES", "SCORER_VERSION", "calls_in_content", "coerce", "finding", "message_of",
           "native_calls", "score_message", "score_recorded", "transport_verdict"]

LENIENT_FORGIVES = (
    "tool calls written into content, when the content is only the call(s): bare JSON, one fenced JSON block "
    "after at most one short lead-in line, or any number of <tool_call> blocks",
    "native arguments sent as a JSON object instead of a string, or as an empty string (read as {})",
    "a tool call whose `type` is missing or not 'function'",
    "'42'/'4.5'/'true' where the schema wants an integer/number/boolean, and an integral 25.0 for an integer",
    "a tool name that differs from an offered one only in case, separators, a namespace prefix (functions.x), "
    "or one typo after the same first word (set_timr, not get_timer for set_timer)",
    "code output with trailing blanks, or with extra lines printed before the expected output",
)

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

# JSON Schema counts 25.0 as an integer; the wire format a strict client parses does not.
_EXACT_TYPES = Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
)
ExactValidator = validators.extend(Draft202012Validator, type_checker=_EXACT_TYPES)  # type: ignore[no-untyped-call]


def _resolve_name(name: str, offered: list[str], *, lenient: bool) -> tuple[str, Finding | None]:
    """The offered tool a name refers to; in strict mode only an exact name does."""
    if name in offered:
        return name, None
    close = near_miss(name, offered)
    if close and lenient:
        return close, None  # the strict pass has already recorded the near miss
    if close:
        return name, finding("SEM_TOOL_NAME_NEAR_MISS", f"{name!r} is not offered; near {close!r}")
    return name, finding("SEM_INVENTED_TOOL", f"{name!r} is not among the offered tools {offered}")


def coerce(value: Any, schema: dict[str, Any]) -> Any:
    """Lenient reading: strings as numbers/booleans, and integral floats as integers, where the schema asks."""
    types = schema.get("type")
    wanted = set(types) if isinstance(types, list) else {types}
    if isinstance(value, float) and "integer" in wanted and value.is_integer():
        return int(value)
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
    """Draft 2020-12 validation with exact JSON types, no coercion; one finding per failing keyword and path."""
    out: list[Finding] = []
    seen: set[str] = set()
    for err in sorted(ExactValidator(schema).iter_errors(args), key=_err_key):
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
    for path, matchers in spec.args.items():
        for matcher in matchers if isinstance(matchers, list) else [matchers]:
            reason = matcher.check(lookup(args, path), lenient=lenient)
            if reason:
                out.append(finding("SEM_ARG_VALUE", f"{call.name}.{path}: {reason}"))
                break
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
    tolerated = offered if expect.allow_extra is True else (expect.allow_extra or [])
    if extra and not all(n in tolerated for n in extra):
        out.append(finding("SEM_EXTRA_CALL", f"unexpected further calls: {extra}"))
    return out


def _judge_no_call(case: Case, expect: ExpectNoToolCall, message: dict[str, Any], *, lenient: bool) -> list[Finding]:
    out: list[Finding] = []
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    attempted = [str((c.get("function") or {}).get("name") if isinstance(c.get("function"), dict) else "?")
                 for c in native_calls(message)]
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


def _shape_kind(message: dict[str, Any]) -> type:
    """The kind of expectation the response's shape answers: calls (native or in content) or a text answer."""
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    return ExpectToolCalls if native_calls(message) or calls_in_content(content or "") else ExpectNoToolCall


def _with_own_rubric(best: Verdict, best_expect: Any, judged: list[tuple[Any, Verdict]],
                     message: dict[str, Any]) -> Verdict:
    """A failed verdict taken against another kind of expectation also names what the rubric of the response's own
    kind found: an agent that agrees in words to a destructive action gets SEM_NO_TOOL_CALL (from the read-only call
    the case also accepts) and the content codes of the answer the case expects in words."""
    kind = _shape_kind(message)
    if isinstance(best_expect, kind):
        return best
    seen = set(best.codes)
    extra = [f for e, v in judged if isinstance(e, kind) for f in v.findings if f.code not in seen]
    extra = list({f.code: f for f in extra}.values())
    if not extra:
        return best
    return Verdict(strict_pass=False, lenient_pass=False, findings=[*best.findings, *extra])


def score_message(case: Case, message: dict[str, Any], *, finish_reason: str | None = None) -> Verdict:
    """The verdict of one assistant message: the best over `expect` and `also_accept`.

    A response stopped at max_tokens (`finish_reason: "length"`) is incomplete: it never passes, in either
    mode, whatever it holds; the other findings are kept to show what was there.
    """
    judged = [(e, _verdict_for(case, e, message)) for e in (case.expect, *case.also_accept)]
    best_expect, best = max(judged, key=lambda pair: _rank(pair[1]))
    if not best.lenient_pass:
        best = _with_own_rubric(best, best_expect, judged, message)
    if finish_reason == "length":
        cut = finding("TRANSPORT_TRUNCATED", "generation stopped at max_tokens; the response is incomplete")
        best = Verdict(strict_pass=False, lenient_pass=False, findings=[*best.findings, cut])
    return best


def transport_verdict(code: str, message: str) -> Verdict:
    """A failed exchange: nothing to judge beyond the transport finding."""
    return Verdict(strict_pass=False, lenient_pass=False, findings=[finding(code, message)])


_BODY_KEYS = {"choices", "object", "error", "error_text", "id", "model", "usage", "created"}
_MESSAGE_KEYS = {"role", "content", "tool_calls"}


def message_of(response: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The assistant message of a chat-completion body, a recorded attempt, or a bare message."""
    if isinstance(response.get("response"), dict):
        response = response["response"]
    if _BODY_KEYS & response.keys():
        return body_message(response)
    return response, None


def score_recorded(case: Case, recorded: dict[str, Any]) -> Verdict:
    """Offline scoring that agrees with a live run: a bare assistant message, one choice, a chat-completion
    body (as the client received it), or a recorded attempt (whose transport error, if any, is the verdict)."""
    if "response" in recorded:
        error = recorded.get("error")
        if isinstance(error, str) and error:
            return transport_verdict(error_code_of(error), error)
        recorded = recorded["response"]
        if not isinstance(recorded, dict):
            return transport_verdict("TRANSPORT_BAD_RESPONSE", "the attempt recorded no response body")
    if _BODY_KEYS & recorded.keys():
        problem = body_problem(recorded)
        if problem:
            return transport_verdict(*problem)
        message, finish = body_message(recorded)
        return score_message(case, message, finish_reason=finish)
    if isinstance(recorded.get("message"), dict):  # one choice: {"message": …, "finish_reason": …}
        finish = recorded.get("finish_reason")
        return score_message(case, recorded["message"], finish_reason=finish if isinstance(finish, str) else None)
    if _MESSAGE_KEYS & recorded.keys():
        return score_message(case, recorded)
    raise UsageError(f"expected an assistant message, a chat-completion body or a recorded attempt; "
                     f"got an object with keys {sorted(recorded)[:8]}")
