"""Streaming HTTP client: timestamps every SSE line as it arrives; parsing waits until the stream ends."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

Endpoint = Literal["chat", "completion"]
PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completion": "/completion"}


@dataclass
class Exchange:
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

    def rebase(self) -> None:
        """Make every time relative to the request reaching the wire, not to the task starting."""
        shift = self.wire_s or 0.0
        if shift <= 0:
            return
        self.t_sent_unix += shift
        self.events = [(t - shift, d) for t, d in self.events]
        self.headers_s = self.headers_s - shift if self.headers_s is not None else None
        self.end_s = self.end_s - shift if self.end_s is not None else None
        self.queued_s, self.wire_s = shift, 0.0


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


async def _stream(client: httpx.AsyncClient, url: str, body: dict[str, Any], ex: Exchange, t0: float) -> None:
    async def trace(event: str, info: dict[str, Any]) -> None:
        # The moment the request line goes on the wire, after any wait for a pooled connection.
        if ex.wire_s is None and event.endswith("send_request_headers.started"):
            ex.wire_s = time.perf_counter() - t0

    async with client.stream("POST", url, json=body, extensions={"trace": trace}) as resp:
        ex.status = resp.status_code
        ex.headers_s = time.perf_counter() - t0
        if resp.status_code != 200:
            raw = await resp.aread()
            ex.error = f"HTTP {resp.status_code}: {raw[:200].decode('utf-8', errors='replace').strip()}"
            ex.end_s = time.perf_counter() - t0
            return
        buf = b""
        events = ex.events
        async for chunk in resp.aiter_bytes():
            t = time.perf_counter() - t0
            buf += chunk
            if b"\n" not in chunk:
                continue
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.startswith(b"data:"):
                    events.append((t, line[5:].strip()))
        if buf.startswith(b"data:"):
            events.append((time.perf_counter() - t0, buf[5:].strip()))
        ex.end_s = time.perf_counter() - t0


async def send(client: httpx.AsyncClient, url: str, body: dict[str, Any], timeout_s: float) -> Exchange:
    """POST and read the SSE stream within `timeout_s`; every failure is recorded, never raised.

    A pooled keep-alive connection the server closed while idle fails before any response byte; that one
    case is sent once more on a new connection (and marked `resent`), since the server never answered it.
    """
    ex = await _send_once(client, url, body, timeout_s)
    if ex.transport_failure and ex.status is None and ex.error and "without sending a response" in ex.error:
        ex = await _send_once(client, url, body, timeout_s)
        ex.resent = True
    return ex


async def _send_once(client: httpx.AsyncClient, url: str, body: dict[str, Any], timeout_s: float) -> Exchange:
    ex = Exchange(t_sent_unix=time.time())
    t0 = time.perf_counter()
    try:
        await asyncio.wait_for(_stream(client, url, body, ex, t0), timeout=timeout_s)
    except asyncio.TimeoutError:
        ex.error = f"no complete response within the {timeout_s:g} s per-request timeout"
        ex.transport_failure = True
    except httpx.TimeoutException as exc:
        ex.error = f"timed out ({type(exc).__name__}) within the {timeout_s:g} s per-request timeout"
        ex.transport_failure = True
    except httpx.RemoteProtocolError as exc:
        ex.error = f"stream dropped by the server: {exc}"
        ex.transport_failure = True
    except httpx.TransportError as exc:
        ex.error = f"transport error {type(exc).__name__}: {exc}"
        ex.transport_failure = True
    if ex.end_s is None:
        ex.end_s = time.perf_counter() - t0
    ex.rebase()
    return ex
