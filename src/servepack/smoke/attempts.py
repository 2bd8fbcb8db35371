"""The one-response case loop every such runner shares: send in each mode, judge, flag a stream mismatch, repeat.

A runner supplies how an answer is judged (`score`) and what an answer decided (`decide`, compared across modes).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from servepack.smoke.client import ChatClient, ChatExchange
from servepack.smoke.codes import finding
from servepack.smoke.result import Attempt, Verdict
from servepack.smoke.scorer import transport_verdict

Score = Callable[[ChatExchange], Verdict]
Decide = Callable[[dict[str, Any]], Any]


def exchange_attempt(ex: ChatExchange, repeat_index: int, score: Score) -> Attempt:
    """One exchange as a recorded attempt: a transport failure is its own verdict, else `score` judges it."""
    verdict = transport_verdict(ex.error_code, ex.error or ex.error_code) if ex.error_code else score(ex)
    return Attempt(mode=ex.mode, repeat_index=repeat_index, request=ex.request, response=ex.response,
                   error=ex.error, duration_s=round(ex.duration_s, 4), verdict=verdict)


def response_message(attempt: Attempt) -> dict[str, Any]:
    """The assistant message of a recorded attempt's response ({} when there is none)."""
    choices = (attempt.response or {}).get("choices") or [{}]
    msg = choices[0].get("message") if isinstance(choices[0], dict) else None
    return msg if isinstance(msg, dict) else {}


def flag_stream_mismatch(attempts: list[Attempt], decide: Decide) -> None:
    """Mark the streamed attempt when it decided differently from the non-streamed one."""
    by_mode = {a.mode: a for a in attempts}
    ns, st = by_mode.get("nonstream"), by_mode.get("stream")
    if ns is None or st is None or ns.error or st.error:
        return
    a, b = (decide(response_message(x)) for x in (ns, st))
    if a != b:
        f = finding("STREAM_MISMATCH", f"non-streamed {json.dumps(a)[:150]} ≠ streamed {json.dumps(b)[:150]}")
        st.verdict = Verdict(strict_pass=False, lenient_pass=False, findings=[*st.verdict.findings, f])


def attempt_rounds(client: ChatClient, request: dict[str, Any], *, repeat: int, modes: Sequence[str], score: Score,
                   decide: Decide) -> list[Attempt]:
    """`repeat` rounds of the request in every mode, each round checked for a stream mismatch."""
    attempts: list[Attempt] = []
    for r in range(repeat):
        round_ = [exchange_attempt(client.send(request, mode), r, score) for mode in modes]
        flag_stream_mismatch(round_, decide)
        attempts += round_
    return attempts
