"""Drive a BFCL multi-turn entry through a server turn by turn, its calls executed in the sandbox, and judge it.

Per turn, as upstream's function-calling inference loop does: the turn's user message is added, then rounds
follow: the model is asked (the turn's tools, `parallel_tool_calls: true` as in OpenAI's default); a round whose
message decodes to calls (multi_turn_check.decode_step) has them executed against the conversation's backends and
their results sent back as `role: tool` messages, one per call, in order; a round that decodes to none ends the turn
(its text kept in the history, undecodable calls dropped from it, since a server refuses calls with no results).
After the MAX_STEPS + 1-th round of calls in a turn the conversation is cut off (force-terminated). A transport
failure ends the attempt with that error as its verdict; a backend run that fails ends it too, recorded in the
response (`backend_error`), which is then the verdict (BFCL_MT_BACKEND).

Each attempt records every round (`response.turns[turn][step]`: the assistant message and the results its calls
got), which is what multi_turn_check re-judges. Each mode is a whole conversation; a streamed one whose decoded
calls differ from the non-streamed one of the same round gets STREAM_MISMATCH.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from servepack.smoke.bfcl.multi_turn import MAX_STEPS, BackendError, Call, MultiTurnEntry, execute
from servepack.smoke.bfcl.multi_turn_check import Executor, decode_step, decoded_turns, score_turns
from servepack.smoke.client import ChatClient, ChatExchange
from servepack.smoke.codes import finding
from servepack.smoke.result import Attempt, CaseResult, Verdict, case_result
from servepack.smoke.scorer import transport_verdict

RESULT_CHARS = 4000  # of each tool result kept in the record (the verdict replays the calls, it does not read these)
Send = Callable[[dict[str, Any]], ChatExchange]


@dataclass
class Conversation:
    turns: list[list[dict[str, Any]]] = field(default_factory=list)
    rounds: int = 0
    force_quit: bool = False
    error_code: str | None = None  # a transport failure
    error: str | None = None
    backend_error: str | None = None  # a sandboxed backend run that failed
    duration_s: float = 0.0


def _history(message: dict[str, Any], calls: list[Call] | None, turn: int, step: int) -> dict[str, Any]:
    content = message.get("content")
    out: dict[str, Any] = {"role": "assistant", "content": content if isinstance(content, str) else ""}
    if calls:
        out["tool_calls"] = []
        for i, (raw, call) in enumerate(zip(message["tool_calls"], calls, strict=True)):
            call_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else f"call_{turn}_{step}_{i}"
            out["tool_calls"].append({"id": call_id, "type": "function", "function": {
                "name": call["name"], "arguments": json.dumps(call["kwargs"])}})
    return out


def converse(entry: MultiTurnEntry, send: Send, base: dict[str, Any], run: Executor = execute) -> Conversation:
    """Drive `entry` through `send` (each request is `base` plus messages and tools); see the module doc."""
    started = time.perf_counter()
    conv = Conversation()
    messages: list[dict[str, Any]] = []
    executed: list[list[list[Call]]] = []
    for t in range(len(entry.turns)):
        messages += entry.user_messages(t)
        tools = entry.tools_at(t)
        steps: list[dict[str, Any]] = []
        conv.turns.append(steps)
        executed.append([])
        count = 0
        while True:
            ex = send({**base, "messages": list(messages), "tools": tools})
            conv.rounds += 1
            if ex.error_code:
                conv.error_code, conv.error = ex.error_code, ex.error or ex.error_code
                conv.duration_s = time.perf_counter() - started
                return conv
            message = ex.message
            calls = decode_step(message)
            steps.append({"message": message})
            history = _history(message, calls, t, len(steps) - 1)
            messages.append(history)
            if not calls:
                break
            executed[-1].append(calls)
            try:
                results = run(entry, executed, None)[-1]["model"][-1]
            except BackendError as exc:
                conv.backend_error = str(exc)
                conv.duration_s = time.perf_counter() - started
                return conv
            steps[-1]["results"] = [r[:RESULT_CHARS] for r in results]
            for tool_call, result in zip(history["tool_calls"], results, strict=True):
                messages.append({"role": "tool", "tool_call_id": tool_call["id"], "content": result})
            count += 1
            if count > MAX_STEPS:
                conv.force_quit = True
                break
        if conv.force_quit:
            break
    conv.duration_s = time.perf_counter() - started
    return conv


def _attempt(entry: MultiTurnEntry, mode: str, repeat_index: int, conv: Conversation, base: dict[str, Any],
             run: Executor) -> Attempt:
    response: dict[str, Any] = {"turns": conv.turns, "rounds": conv.rounds, "force_terminated": conv.force_quit}
    if conv.backend_error:
        response["backend_error"] = conv.backend_error
    if conv.error_code:
        verdict = transport_verdict(conv.error_code, conv.error or conv.error_code)
    else:
        verdict = score_response(entry, response, run)
    return Attempt(mode=mode, repeat_index=repeat_index,
                   request={**base, "entry": entry.id, "max_steps": MAX_STEPS}, response=response,
                   error=conv.error, duration_s=round(conv.duration_s, 3), verdict=verdict)


def score_response(entry: MultiTurnEntry, response: dict[str, Any], run: Executor = execute) -> Verdict:
    """The verdict of a recorded conversation (an attempt's `response`): its backend failure, else the checker's."""
    if isinstance(response.get("backend_error"), str):
        return Verdict(strict_pass=False, lenient_pass=False,
                       findings=[finding("BFCL_MT_BACKEND", response["backend_error"])])
    turns = response.get("turns")
    if not isinstance(turns, list) or not all(isinstance(t, list) for t in turns):
        return transport_verdict("TRANSPORT_BAD_RESPONSE", "no recorded turns ({'turns': [[{'message': …}]]})")
    return score_turns(entry, turns, run)


def flag_stream_mismatch(attempts: list[Attempt]) -> None:
    """Mark a round's streamed conversation when its decoded calls differ from the non-streamed one's."""
    by_mode = {a.mode: a for a in attempts}
    ns, st = by_mode.get("nonstream"), by_mode.get("stream")
    if ns is None or st is None or ns.error or st.error:
        return
    a, b = (decoded_turns((x.response or {}).get("turns") or []) for x in (ns, st))
    if a != b:
        f = finding("STREAM_MISMATCH", "the streamed conversation made other calls than the non-streamed one")
        st.verdict = Verdict(strict_pass=False, lenient_pass=False, findings=[*st.verdict.findings, f])


def _send(client: ChatClient, mode: str, request: dict[str, Any]) -> ChatExchange:
    return client.send(request, mode)


def run_entry(client: ChatClient, entry: MultiTurnEntry, model: str, *, temperature: float, max_tokens: int,
              repeat: int, modes: Sequence[str], run: Executor = execute) -> CaseResult:
    """`repeat` rounds of whole conversations, one per mode, each judged; the entry's CaseResult."""
    base = {"model": model, "temperature": temperature, "max_tokens": max_tokens, "parallel_tool_calls": True}
    attempts: list[Attempt] = []
    for r in range(repeat):
        round_ = []
        for mode in modes:
            conv = converse(entry, functools.partial(_send, client, mode), base, run)
            round_.append(_attempt(entry, mode, r, conv, base, run))
        flag_stream_mismatch(round_)
        attempts += round_
    turns = len(entry.ground_truth)
    return case_result(entry.id, entry.category, f"BFCL {entry.category} (executed, state and response checks): "
                       f"{turns} turns over {', '.join(entry.classes)}", attempts)
