"""The Layer B loop: model → tool calls → executed results → … until a text answer or the step limit.

Where strict and lenient would differ, the loop runs as a forgiving runtime (a call leaked into `content`
is executed, a near-miss tool name is mapped, "42" is read as 42) and records each forgiveness as a
`lenient_ok` finding, so one episode yields both scores: strict passes only when nothing was forgiven.
A model error the runtime cannot mend (invented tool, arguments that stay invalid) is returned to the
model as a tool error, as a real runtime would, and recorded too.
"""

from __future__ import annotations

import difflib
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from jsonschema import Draft202012Validator

from servepack.smoke.client import ChatClient
from servepack.smoke.layer_b.cases import GoldenTurn, LayerBCase
from servepack.smoke.layer_b.tools import SCHEMAS, execute, schemas_for
from servepack.smoke.layer_b.world import World
from servepack.smoke.result import Finding
from servepack.smoke.scorer import calls_in_content, coerce

DEFAULT_SYSTEM = (
    "You are an agent with tools, working in a workspace directory. Use the tools to carry out the task; "
    "file paths are relative to the workspace. Ask the user before doing anything destructive or anything "
    "the user said needs confirmation. When the task is done, reply with a short final answer."
)


@dataclass(frozen=True)
class Reply:
    """One assistant turn as the responder got it."""

    message: dict[str, Any]
    response: dict[str, Any] | None
    request: dict[str, Any] | None = None
    error_code: str | None = None
    error: str | None = None
    duration_s: float = 0.0


class Responder(Protocol):
    """Produces the next assistant message for a conversation (a server, or a script in self-tests)."""

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply: ...


class ScriptedResponder:
    """Replays a golden script, one turn per call, whatever the conversation says."""

    def __init__(self, turns: Sequence[GoldenTurn]) -> None:
        self._turns = list(turns)
        self._n = 0

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        turn = self._turns[self._n] if self._n < len(self._turns) else GoldenTurn(content="")
        self._n += 1
        return Reply(message=golden_message(turn, self._n), response=None)


class TextResponder:
    """Answers in text at once, never acting (the 'do-nothing' responder)."""

    def __init__(self, text: str = "Sure, I have done that.") -> None:
        self._text = text

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        return Reply(message={"role": "assistant", "content": self._text}, response=None)


class HttpResponder:
    """Asks an OpenAI-compatible server (native `tools`), streamed or not."""

    def __init__(self, client: ChatClient, model: str, *, temperature: float, max_tokens: int, stream: bool) -> None:
        self._client, self._model, self._stream = client, model, stream
        self._temperature, self._max_tokens = temperature, max_tokens

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        request = {
            "model": self._model,
            "messages": messages,
            "tools": tools,
            "temperature": self._temperature,
            "max_tokens": self._max_tokens,
        }
        ex = self._client.send(request, "stream" if self._stream else "nonstream")
        return Reply(ex.message, ex.response, None, ex.error_code, ex.error, ex.duration_s)


def golden_message(turn: GoldenTurn, n: int) -> dict[str, Any]:
    """A golden turn as an OpenAI assistant message."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{n}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for i, c in enumerate(turn.tool_calls)
        ]
    return message


@dataclass
class Episode:
    """What happened: the conversation, raw responses, forgiven or failed protocol steps, the answer."""

    messages: list[dict[str, Any]]
    responses: list[dict[str, Any] | None] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    final_answer: str | None = None
    steps: int = 0
    calls: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None
    duration_s: float = 0.0


def _f(code: str, layer: Any, message: str, *, lenient_ok: bool = False) -> Finding:
    return Finding(code=code, layer=layer, message=message[:500], lenient_ok=lenient_ok)


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().rsplit(".", 1)[-1])


def _resolve(name: str, offered: list[str], findings: list[Finding]) -> str | None:
    if name in offered:
        return name
    by_norm = {_norm(o): o for o in offered}
    close = by_norm.get(_norm(name)) or next(iter(difflib.get_close_matches(name, offered, 1, 0.8)), None)
    if close:
        findings.append(_f("SEM_TOOL_NAME_NEAR_MISS", "semantics", f"{name!r} mapped to {close!r}", lenient_ok=True))
        return close
    findings.append(_f("SEM_INVENTED_TOOL", "semantics", f"{name!r} is not an offered tool", lenient_ok=True))
    return None


def _arguments(name: str, raw: Any, findings: list[Finding]) -> tuple[dict[str, Any] | None, str | None]:
    """Validated (or leniently coerced) arguments, or an error text for the model."""
    args: Any = raw
    if isinstance(raw, str):
        try:
            args = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            args = None
    if not isinstance(args, dict):
        findings.append(_f("EXTRACTION_ARGS_NOT_JSON", "extraction", f"{name}: {str(raw)[:120]}", lenient_ok=True))
        return None, "arguments are not a JSON object"
    params = SCHEMAS[name]["function"]["parameters"]
    errors = [e.message for e in Draft202012Validator(params).iter_errors(args)]
    if not errors:
        return args, None
    findings.append(_f("SCHEMA_INVALID_ARGS", "schema", f"{name}: {errors[0]}", lenient_ok=True))
    coerced = coerce(args, params)
    if not list(Draft202012Validator(params).iter_errors(coerced)):
        return coerced, None
    return None, f"invalid arguments for {name}: {'; '.join(errors[:3])}"


def _calls(message: dict[str, Any], findings: list[Finding], step: int) -> list[tuple[str, str, Any]]:
    """(id, name, raw arguments) of the message's calls; leaked calls in content are taken, and recorded."""
    native = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    if native:
        out = []
        for i, call in enumerate(native):
            fn = call.get("function") or {}
            out.append((str(call.get("id") or f"call_{i}"), str(fn.get("name") or ""), fn.get("arguments")))
        return out
    content = message.get("content")
    leaked = calls_in_content(content) if isinstance(content, str) else []
    if leaked:
        names = ", ".join(str(c["name"]) for c in leaked)
        findings.append(_f("EXTRACTION_CALL_IN_CONTENT", "extraction", f"call(s) in content: {names}", lenient_ok=True))
    return [(f"leaked_{step}_{i}", str(c["name"]), c["arguments"]) for i, c in enumerate(leaked)]


def _history_call(call_id: str, name: str, args: dict[str, Any] | None) -> dict[str, Any]:
    # Invalid arguments are replaced by {} so the server can render the history on the next turn.
    arguments = json.dumps(args if args is not None else {})
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _run_calls(
    calls: list[tuple[str, str, Any]], case: LayerBCase, world: World, episode: Episode, step: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Execute one turn's calls; the assistant's calls as history records them, and the tool messages."""
    history: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for call_id, raw_name, raw_args in calls:
        name = _resolve(raw_name, case.tools, episode.findings)
        args: dict[str, Any] | None = None
        problem: str | None = f"unknown tool {raw_name!r}; available: {', '.join(case.tools)}"
        if name is not None:
            args, problem = _arguments(name, raw_args, episode.findings)
        episode.calls.append((name or raw_name, json.dumps(args, sort_keys=True)))
        if name is not None and args is not None:
            text = execute(world, name, args, step=step).text
        else:
            text = json.dumps({"error": problem})
        history.append(_history_call(call_id, name or raw_name, args))
        results.append({"role": "tool", "tool_call_id": call_id, "content": text})
    return history, results


def run_episode(case: LayerBCase, world: World, responder: Responder) -> Episode:
    """Drive one episode of `case` in `world`; the judge reads the world and the episode afterwards."""
    started = time.perf_counter()
    messages = [dict(m) for m in case.messages]
    if not messages or messages[0].get("role") != "system":
        messages.insert(0, {"role": "system", "content": DEFAULT_SYSTEM})
    episode = Episode(messages=messages)
    tools = schemas_for(case.tools)
    last_had_calls = False
    for step in range(case.max_steps):
        reply = responder.reply(messages, tools)
        episode.steps += 1
        episode.responses.append(reply.response)
        if reply.error_code:
            episode.findings.append(_f(reply.error_code, "transport", reply.error or reply.error_code))
            episode.error = reply.error
            break
        calls = _calls(reply.message, episode.findings, step)
        if not calls:
            content = reply.message.get("content")
            episode.final_answer = content.strip() if isinstance(content, str) else ""
            messages.append({"role": "assistant", "content": episode.final_answer})
            last_had_calls = False
            break
        last_had_calls = True
        leaked = calls[0][0].startswith("leaked_")
        history, results = _run_calls(calls, case, world, episode, step)
        content = reply.message.get("content")
        keep = content if isinstance(content, str) and not leaked else ""
        messages.append({"role": "assistant", "content": keep, "tool_calls": history})
        messages.extend(results)
    if last_had_calls:
        episode.findings.append(
            _f("SEM_STEP_LIMIT", "semantics", f"still calling tools after max_steps={case.max_steps}; no answer")
        )
    episode.duration_s = time.perf_counter() - started
    return episode
