"""Streaming HTTP client: timestamps every SSE line as it arrives; parsing waits until the stream ends.

Every streamed load request, a bench cell's and a capacity point's, is sent by `send` on a `WireClient`
(bench/wire.py), which reads the response into a `StreamExchange`.

A stream that goes quiet is cut by inactivity, not only by the per-request timeout: `StallBound` says how long
"no byte" may last (from the cell's own gaps, with an absolute floor), and a stream past it is recorded as stalled.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from servepack.bench.wire import WireClient

Endpoint = Literal["chat", "completion"]
PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completion": "/completion"}


@dataclass
class StreamExchange:
    """One request as the client saw it: send time, status, every `data:` payload with its arrival time."""

    t_sent_unix: float
    status: int | None = None
    events: list[tuple[float, bytes]] = field(default_factory=list)
    headers_s: float | None = None
    end_s: float | None = None
    error: str | None = None
    transport_failure: bool = False
    wire_s: float | None = None
    queued_s: float = 0.0
    resent: bool = False
    last_byte_s: float | None = None
    stalled: bool = False
    stall_bound_s: float | None = None

    def rebase(self) -> None:
        """Make every time relative to the request reaching the wire, not to the task starting."""
        shift = self.wire_s or 0.0
        if shift <= 0:
            return
        self.t_sent_unix += shift
        self.events = [(t - shift, d) for t, d in self.events]
        self.headers_s = self.headers_s - shift if self.headers_s is not None else None
        self.end_s = self.end_s - shift if self.end_s is not None else None
        self.last_byte_s = self.last_byte_s - shift if self.last_byte_s is not None else None
        self.queued_s, self.wire_s = shift, 0.0


# A server check: None when the server shows it is working (it answers, or uses CPU), else what it failed.
ServerProbe = Callable[[], Awaitable[str | None]]


@dataclass(frozen=True)
class StallBound:
    """How long a stream may go without a byte before it counts as stalled.

    Until the second SSE event the server may still be reading the prompt: the bound there is
    max(floor, factor × the cell's slowest first-event time so far). With no such time yet (the cell's first
    request), a long prompt may legitimately take longer than the floor, so at the floor, and every floor after
    it, the server is checked (`probe`): one that neither answers nor uses CPU (stopped, hung) is stalled there;
    without a probe only the timeout applies. After the second event the bound is max(floor, factor × p90 of the
    cell's inter-token gaps); with no earlier gap, max(floor, factor × the stream's own median gap) once it has
    three, else the floor itself: an inter-token gap beyond the floor is a stall with or without a reference.

    A capacity point's bound has no reference (its requests' waits depend on its load): the floor and the server
    check alone; `scope` says "point" in its messages where a bench cell's say "cell".
    """

    floor_s: float = 2.0
    factor: float = 10.0
    gap_ref_s: float | None = None
    first_ref_s: float | None = None
    probe: ServerProbe | None = field(default=None, compare=False)
    scope: str = field(default="cell", compare=False)  # what the references are from, in its words: cell, point

    def first_s(self) -> float | None:
        return None if self.first_ref_s is None else max(self.floor_s, self.factor * self.first_ref_s)

    def gap_s(self, events: list[tuple[float, bytes]]) -> float:
        ref = self.gap_ref_s
        if ref is None and len(events) >= 4:
            gaps = sorted(b[0] - a[0] for a, b in itertools.pairwise(events[1:]))
            ref = gaps[len(gaps) // 2]
        return max(self.floor_s, self.factor * ref) if ref is not None else self.floor_s

    def describe(self, bound: float, phase: str) -> str:
        if phase == "first":
            return f"max(floor {self.floor_s:g} s, {self.factor:g} × the {self.scope}'s slowest first event)"
        if phase == "checked":
            return f"floor {self.floor_s:g} s, no earlier first event in the {self.scope}"
        ref = f"{self.factor:g} × p90 gap {self.gap_ref_s * 1000:.0f} ms" if self.gap_ref_s is not None else \
            "no earlier gap known"
        return f"max(floor {self.floor_s:g} s, {ref})"


class _Stalled(Exception):
    pass


def request_body(
    endpoint: Endpoint, model: str, text: str, gen_tokens: int, *, temperature: float,
    cache_prompt: bool | None, ignore_eos: bool,
) -> dict[str, Any]:
    """The JSON body: exact output length via ignore_eos + max_tokens/n_predict, usage in the stream."""
    body: dict[str, Any]
    if endpoint == "chat":
        body = {
            "model": model, "messages": [{"role": "user", "content": text}], "max_tokens": gen_tokens,
            "stream": True, "stream_options": {"include_usage": True}, "temperature": temperature,
        }
    else:
        body = {"prompt": text, "n_predict": gen_tokens, "stream": True, "temperature": temperature}
    if ignore_eos:
        body["ignore_eos"] = True
    if cache_prompt is not None:
        body["cache_prompt"] = cache_prompt
    return body


async def send(client: WireClient, url: str, body: dict[str, Any] | bytes, timeout_s: float,
               stall: StallBound | None = None) -> StreamExchange:
    """POST and read the SSE stream within `timeout_s`; every failure is recorded, never raised.

    With `stall`, a stream silent for longer than its bound is cut and recorded as stalled. A pooled keep-alive
    connection the server closed while idle fails before any response byte; that one case is sent once more on
    a new connection (and marked `resent`), since the server never answered it.
    """
    ex = await _send_once(client, url, body, timeout_s, stall)
    if ex.transport_failure and ex.status is None and ex.error and "without sending a response" in ex.error:
        ex = await _send_once(client, url, body, timeout_s, stall, fresh=True)
        ex.resent = True
    return ex


async def _watch(task: asyncio.Future[None], ex: StreamExchange, t0: float, timeout_s: float,
                 stall: StallBound | None) -> None:
    """Wait for the stream; cut it at the timeout, or when it has been silent past its stall bound."""
    deadline = t0 + timeout_s
    checked_until = stall.floor_s if stall is not None else 0.0  # reference-free first phase: next server check
    try:
        while True:
            now = time.perf_counter()
            wait = deadline - now
            if stall is not None:
                phase = "first" if len(ex.events) < 2 else "gap"
                bound = stall.first_s() if phase == "first" else stall.gap_s(ex.events)
                since = (ex.wire_s or 0.0) if phase == "first" else (ex.last_byte_s or ex.wire_s or 0.0)
                idle = now - t0 - since
                if bound is None and stall.probe is not None:
                    if idle >= checked_until:
                        n_events = len(ex.events)
                        verdict = await stall.probe()
                        if verdict is not None and len(ex.events) == n_events and not task.done():
                            idle = time.perf_counter() - t0 - since
                            ex.stalled, ex.stall_bound_s = True, round(stall.floor_s, 3)
                            raise _Stalled(f"stalled: no byte for {idle:.1f} s (bound {stall.floor_s:.1f} s = "
                                           f"{stall.describe(stall.floor_s, 'checked')}; server check: {verdict})")
                        checked_until = time.perf_counter() - t0 - since + stall.floor_s
                        continue
                    wait = min(wait, checked_until - idle + 0.01)
                elif bound is not None:
                    if idle >= bound:
                        ex.stalled, ex.stall_bound_s = True, round(bound, 3)
                        raise _Stalled(f"stalled: no byte for {idle:.1f} s "
                                       f"(bound {bound:.1f} s = {stall.describe(bound, phase)})")
                    wait = min(wait, bound - idle + 0.01)
            if wait <= 0:
                raise asyncio.TimeoutError
            done, _ = await asyncio.wait({task}, timeout=wait)
            if done:
                task.result()
                return
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _transport_failure(exc: BaseException, timeout_s: float) -> str:
    """Why a request got no whole response, in words: a stall, the per-request timeout, or the transport."""
    if isinstance(exc, _Stalled):
        return str(exc)
    if isinstance(exc, asyncio.TimeoutError):
        return f"no complete response within the {timeout_s:g} s per-request timeout"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__}) within the {timeout_s:g} s per-request timeout"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"stream dropped by the server: {exc}"
    return f"transport error {type(exc).__name__}: {exc}"


async def _send_once(client: WireClient, url: str, body: dict[str, Any] | bytes, timeout_s: float,
                     stall: StallBound | None = None, *, fresh: bool = False) -> StreamExchange:
    ex = StreamExchange(t_sent_unix=time.time())
    t0 = time.perf_counter()
    try:
        await _watch(asyncio.ensure_future(client.stream(url, body, ex, t0, fresh=fresh)), ex, t0, timeout_s, stall)
    except (_Stalled, asyncio.TimeoutError, httpx.TransportError) as exc:
        ex.error = _transport_failure(exc, timeout_s)
        ex.transport_failure = True
    if ex.end_s is None:
        ex.end_s = time.perf_counter() - t0
    ex.rebase()
    return ex
