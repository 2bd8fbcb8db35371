"""Sending one point's requests in its shape, on one event loop: the prompt pool and the request bodies built before the
point's clock, each shape's coroutine, and the point's mutable state while it runs (`PointState`, one `SentRequest` a
request). `LoadSender` is the half of `LoadRunner` (bench/load.py) that a client worker process runs alone.

- **closed**: `level` streams; each sends its next request when its previous one ends, until the point's request
  budget is spent or its duration is over (no new send after it; requests in flight finish).
- **open**: arrivals at `level` requests a second, constant or Poisson (seeded), scheduled on absolute times from
  the point's start, so a late wake-up never shifts the arrivals after it; the achieved rate is measured from the
  send times. At most `max_in_flight` requests are in flight; an arrival beyond that is recorded as dropped.
- **agent**: `level` concurrent sessions; each turn sends the whole conversation so far (its previous prompt, the
  assistant's reply and a tool result appended), so the server's prefix cache is really reused. `cache_n` is
  recorded per turn; every turn after the first is warm, and so is a first turn whose template opening the server
  reused: agent figures are never a claim's figures.

Every request is sent by `client.send` on the lean `WireClient`; closed and agent streams start staggered by
`STREAM_GAP_S` (their start slots).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from servepack.bench.client import PATHS, StallBound, StreamExchange, request_body, send
from servepack.bench.load_settings import LoadSettings, PointRun
from servepack.bench.prompts import BuiltPrompt, PromptBuilder, Tokenizer
from servepack.bench.wire import WireClient
from servepack.engine.base import Endpoint
from servepack.host.energy import EnergyMeter
from servepack.net import require_loopback

STREAM_GAP_S = 0.002  # closed/agent: stream k starts k × gap after the point (at most 1 s for all of them)


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


@dataclass
class SentRequest:
    ex: StreamExchange
    prompt_tokens: int
    exact: bool
    nonce: str
    stream: int
    in_flight: int
    scheduled_s: float | None = None
    session: int | None = None
    turn: int | None = None
    warm: bool = False
    dropped: bool = False


@dataclass
class PointState:
    """The mutable state of one point while it runs."""

    t0: float
    deadline: float
    budget: int
    t0_unix: float = 0.0
    used: int = 0
    built_during: int = 0
    sent: list[SentRequest] = field(default_factory=list)
    in_flight: int = 0
    issued: int = 0

    def take(self) -> bool:
        """One more request may be sent: the budget is not spent and the duration is not over."""
        if self.issued >= self.budget or time.perf_counter() >= self.deadline:
            return False
        self.issued += 1
        return True


class LoadSender:
    """One endpoint's prompts and the coroutines that send a point's requests in its shape (no point runner)."""

    def __init__(self, endpoint: Endpoint, settings: LoadSettings, tokenizer: Tokenizer, *, llama: bool,
                 ignore_eos: bool = True, server_pids: list[int] | None = None,
                 progress: Callable[[str], None] | None = None, energy: EnergyMeter | None = None) -> None:
        self.energy = energy
        self.base_url = require_loopback(endpoint.base_url.rstrip("/"), "the endpoint")
        self.endpoint, self.s, self.tok, self.llama = endpoint, settings, tokenizer, llama
        self.ignore_eos = ignore_eos
        self.builder = PromptBuilder(tokenizer, seed=settings.seed)
        # Prompts built but never sent, shared by the points: a point takes from here first, and what it did not
        # send comes back (still fresh), so no point builds its whole request budget when its duration ends it.
        self.pool: list[BuiltPrompt] = []
        self._per_stream_rps: float | None = None  # closed loop: requests a second a stream sent, last point
        self._built = 0
        self.server_pids = server_pids or []
        self.say = progress or (lambda _: None)
        self.url = f"{self.base_url}{PATHS[settings.endpoint]}"
        self.last: PointRun | None = None

    # -- building ---------------------------------------------------------------------------------------------

    def _body(self, text: str, *, cache: bool) -> dict[str, Any]:
        return request_body(self.s.endpoint, self.endpoint.model, text, self.s.gen_tokens,
                            temperature=self.s.temperature, cache_prompt=cache if self.llama else None,
                            ignore_eos=self.ignore_eos)

    def _budget(self, level: float) -> int:
        s = self.s
        if s.shape == "open":
            return max(1, min(s.max_requests, math.ceil(level * s.duration_s)))
        return s.max_requests

    def _prompts(self, n: int) -> list[BuiltPrompt]:
        """`n` prompts: the pool's first, then new ones."""
        out = self.pool[:n]
        del self.pool[:n]
        more = n - len(out)
        out += [self.builder.build(self.s.prompt_tokens) for _ in range(more)]
        self._built += more
        return out

    def _closed_need(self, level: int, budget: int) -> int:
        """Prompts a closed point needs before its clock: its budget, or (after a first point) what the last point's
        per-stream rate says this one can send in its duration, with a margin; more are built if it runs short."""
        if self._per_stream_rps is None:
            return budget
        est = math.ceil(self._per_stream_rps * level * self.s.duration_s * 1.3) + 2 * level
        return max(1, min(budget, est))

    def _encoded(self, prompt: BuiltPrompt) -> bytes:
        """A single-shot request's JSON body, encoded before the point's clock starts."""
        return json.dumps(self._body(prompt.body, cache=False)).encode()

    # -- sending ----------------------------------------------------------------------------------------------

    async def _send(self, wire: WireClient, p: PointState, body: dict[str, Any] | bytes,
                    item: SentRequest) -> StreamExchange:
        p.in_flight += 1
        item.in_flight = p.in_flight
        try:
            ex = await send(wire, self.url, body, self.s.timeout_s, StallBound(floor_s=self.s.stall_floor_s))
        finally:
            p.in_flight -= 1
        item.ex = ex
        p.sent.append(item)
        return ex

    @staticmethod
    async def _start_slot(p: PointState, k: int, streams: int) -> float:
        """Wait for stream k's start slot (k × gap after the point's start); its offset in seconds."""
        offset = k * min(STREAM_GAP_S, 1.0 / max(streams, 1))
        delay = p.t0 + offset - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        return offset

    async def _closed(self, wire: WireClient, p: PointState, level: int, prompts: list[BuiltPrompt],
                      bodies: list[bytes], ids: list[int] | None = None) -> None:
        lock = asyncio.Lock()

        async def next_prompt() -> tuple[BuiltPrompt, bytes]:
            i = p.used
            p.used += 1
            while i >= len(prompts):
                # Ran short of prompts built before the clock: build a stream's worth more off the event loop
                # (the wait shows in this request's launch lag, as it should).
                async with lock:
                    if i >= len(prompts):
                        more = await asyncio.to_thread(self._prompts, max(level, 8))
                        p.built_during += len(more)
                        prompts.extend(more)
                        bodies.extend(self._encoded(x) for x in more)
            return prompts[i], bodies[i]

        async def stream(k: int) -> None:
            ready = await self._start_slot(p, k, level)
            while p.take():
                prompt, body = await next_prompt()
                await self._send(wire, p, body,
                                 SentRequest(StreamExchange(0.0), prompt.endpoint_tokens, prompt.exact, prompt.nonce,
                                             k, 0, scheduled_s=ready))
                ready = time.perf_counter() - p.t0

        await asyncio.gather(*(stream(k) for k in (ids if ids is not None else range(level))))

    async def _open(self, wire: WireClient, p: PointState, offsets: list[float], prompts: list[BuiltPrompt],
                    bodies: list[bytes], ids: list[int] | None = None) -> None:
        tasks: list[asyncio.Future[StreamExchange]] = []
        try:
            await self._arrive(wire, p, offsets, prompts, bodies, ids, tasks)
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            # Stopped (Ctrl-C, a spread point told to stop): no request is left running past the point's client.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _arrive(self, wire: WireClient, p: PointState, offsets: list[float], prompts: list[BuiltPrompt],
                      bodies: list[bytes], ids: list[int] | None, tasks: list[asyncio.Future[StreamExchange]]) -> None:
        """Send each arrival at its offset (a task each, into `tasks`)."""
        for j, (off, prompt, body) in enumerate(zip(offsets, prompts, bodies, strict=False)):
            i = ids[j] if ids is not None else j
            if off >= self.s.duration_s:
                break
            delay = p.t0 + off - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            p.issued += 1
            item = SentRequest(StreamExchange(time.time()), prompt.endpoint_tokens, prompt.exact, prompt.nonce, i,
                               p.in_flight, scheduled_s=off)
            if p.in_flight >= self.s.max_in_flight:
                item.dropped = True
                item.ex.error = f"dropped: {p.in_flight} requests in flight (the bound)"
                item.ex.end_s = 0.0
                p.sent.append(item)
                continue
            tasks.append(asyncio.ensure_future(self._send(wire, p, body, item)))

    async def _count(self, client: httpx.AsyncClient, messages: list[dict[str, Any]]) -> tuple[int, bool]:
        """The conversation's prompt tokens as the server counts them (/apply-template + /tokenize)."""
        if self.tok.exact:
            # Both calls are read-only, so a pooled connection the server closed after the previous stream
            # ("disconnected without sending a response") is retried once on a fresh one, not given up for an
            # estimate (that under-read a warm turn by 47-65 tokens, about one count in six).
            for attempt in (1, 2):
                try:
                    r = await client.post(f"{self.base_url}/apply-template", json={"messages": messages})
                    r.raise_for_status()
                    text = r.json()["prompt"]
                    t = await client.post(f"{self.base_url}/tokenize",
                                          json={"content": text, "add_special": True, "parse_special": True})
                    t.raise_for_status()
                    return len(t.json()["tokens"]), True
                except (httpx.RemoteProtocolError, httpx.ConnectError, httpx.ReadError):
                    if attempt == 2:
                        break
                except (httpx.HTTPError, ValueError, KeyError, TypeError):
                    break
        return sum(len(self.tok.tokenize(str(m.get("content") or ""))) for m in messages), False

    async def _agent(self, client: httpx.AsyncClient, wire: WireClient, p: PointState, level: int,
                     firsts: list[BuiltPrompt], tools: list[BuiltPrompt]) -> None:
        sessions = iter(enumerate(firsts))
        tool_it = iter(tools)

        async def worker(k: int) -> None:
            ready: float | None = await self._start_slot(p, k, level)
            for sid, first in sessions:
                messages: list[dict[str, Any]] = [{"role": "user", "content": first.body}]
                count, exact = first.endpoint_tokens, first.exact
                for turn in range(self.s.turns):
                    if not p.take():
                        return
                    if turn:
                        count, exact = await self._count(client, messages)
                    body = self._body("", cache=True)
                    body["messages"] = list(messages)
                    # Counting a turn's tokens is prompt building, not load: the turn is due once it is counted.
                    due = ready if ready is not None else time.perf_counter() - p.t0
                    ex = await self._send(wire, p, body,
                                          SentRequest(StreamExchange(0.0), count, exact, first.nonce, k, 0,
                                                      scheduled_s=due, session=sid, turn=turn, warm=turn > 0))
                    ready = None
                    if ex.error or ex.status != 200:
                        break
                    tool = next(tool_it, None)
                    messages += [{"role": "assistant", "content": reply_text(ex.events)},
                                 {"role": "tool", "tool_call_id": f"call-{sid}-{turn}",
                                  "content": tool.body if tool else "ok"}]

        await asyncio.gather(*(worker(k) for k in range(level)))
