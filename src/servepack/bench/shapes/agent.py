"""agent: `level` concurrent sessions; each turn sends the whole conversation so far (its previous prompt, the
assistant's reply and a tool result appended), so the server's prefix cache is really reused. `cache_n` is recorded
per turn; every turn after the first is warm, and so is a first turn whose template opening the server reused: agent
figures are never a claim's. Sessions start staggered by `STREAM_GAP_S` (their start slots)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import TYPE_CHECKING, Any

import httpx

from servepack.bench.client import StreamExchange
from servepack.bench.prompts import BuiltPrompt
from servepack.bench.shapes.base import (
    PointPlan,
    PointState,
    Sender,
    SentRequest,
    ShapeDefaults,
    ShapeSettings,
    start_slot,
)

if TYPE_CHECKING:
    from servepack.bench.wire import WireClient


def reply_text(events: list[tuple[float, bytes]]) -> str:
    """The assistant's streamed content, joined (what the next agent turn appends)."""
    out = []
    for _, data in events:
        if data == b"[DONE]":
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            continue
        for choice in (obj.get("choices") or []) if isinstance(obj, dict) else []:
            content = (choice.get("delta") or {}).get("content")
            if isinstance(content, str):
                out.append(content)
    return "".join(out)


async def count_tokens(sender: Sender, client: httpx.AsyncClient, messages: list[dict[str, Any]]
                       ) -> tuple[int, bool]:
    """The conversation's prompt tokens as the server counts them (/apply-template + /tokenize)."""
    if sender.tok.exact:
        # Both calls are read-only, so a pooled connection the server closed after the previous stream
        # ("disconnected without sending a response") is retried once on a fresh one, not given up for an
        # estimate (that under-read a warm turn by 47-65 tokens, about one count in six).
        for attempt in (1, 2):
            try:
                r = await client.post(f"{sender.base_url}/apply-template", json={"messages": messages})
                r.raise_for_status()
                text = r.json()["prompt"]
                t = await client.post(f"{sender.base_url}/tokenize",
                                      json={"content": text, "add_special": True, "parse_special": True})
                t.raise_for_status()
                return len(t.json()["tokens"]), True
            except (httpx.RemoteProtocolError, httpx.ConnectError, httpx.ReadError):
                if attempt == 2:
                    break
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                break
    return sum(len(sender.tok.tokenize(str(m.get("content") or ""))) for m in messages), False


class AgentShape(ShapeDefaults):
    """Multi-turn sessions that reuse the server's prefix cache: warm, never a claim's figures."""

    name = "agent"
    help = "N multi-turn sessions (warm)"
    unit = "sessions"
    counts_streams = True
    scheduled = False
    warm = True
    spreads = False

    def check(self, settings: ShapeSettings) -> str | None:
        if settings.endpoint != "chat":
            return "agent sessions are chat conversations: use the chat endpoint"
        if settings.workers > 1:
            return "agent sessions run in one client process: drop --client-workers for --shape agent"
        return None

    def plan(self, sender: Sender, index: int, level: float, budget: int, streams: int) -> PointPlan:
        prompts = sender.take_prompts(math.ceil(budget / sender.s.turns) + streams)
        return PointPlan(prompts=prompts, tools=[sender.builder.build(sender.s.tool_tokens) for _ in range(budget)])

    async def send(self, sender: Sender, client: httpx.AsyncClient | None, wire: WireClient, p: PointState,
                   streams: int, plan: PointPlan) -> None:
        assert client is not None  # sessions never run in a client worker process (`spreads` is False)
        counter = client
        sessions = iter(enumerate(plan.prompts))
        tool_it = iter(plan.tools)
        turns = sender.s.turns

        async def worker(k: int) -> None:
            ready: float | None = await start_slot(p, k, streams)
            for sid, first in sessions:
                messages: list[dict[str, Any]] = [{"role": "user", "content": first.body}]
                count, exact = first.endpoint_tokens, first.exact
                for turn in range(turns):
                    if not p.take():
                        return
                    if turn:
                        count, exact = await count_tokens(sender, counter, messages)
                    body = sender.body_for("", cache=True)
                    body["messages"] = list(messages)
                    # Counting a turn's tokens is prompt building, not load: the turn is due once it is counted.
                    due = ready if ready is not None else time.perf_counter() - p.t0
                    ex = await sender.send_one(wire, p, body,
                                               SentRequest(StreamExchange(0.0), count, exact, first.nonce, k, 0,
                                                           scheduled_s=due, session=sid, turn=turn, warm=turn > 0))
                    ready = None
                    if ex.error or ex.status != 200:
                        break
                    tool = next(tool_it, None)
                    messages += [{"role": "assistant", "content": reply_text(ex.events)},
                                 {"role": "tool", "tool_call_id": f"call-{sid}-{turn}",
                                  "content": tool.body if tool else "ok"}]

        await asyncio.gather(*(worker(k) for k in range(streams)))

    def unsent(self, prompts: list[BuiltPrompt], used: int, issued: int) -> list[BuiltPrompt]:
        return []  # the first prompts of sessions that never started are not given back
