"""The load generator's HTTP/1.1 client: the response parser against bytes cut at every boundary, and its pool."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any

import httpx
import pytest

import servepack.bench.wire as wire
from servepack.bench.client import StreamExchange, send
from servepack.bench.wire import NO_RESPONSE, WireClient, _Conn
from servepack.testing import Script, ScriptedServer


def _sse(*payloads: bytes) -> bytes:
    return b"".join(b"data: " + p + b"\n\n" for p in payloads)


def _chunked(body: bytes, sizes: list[int]) -> bytes:
    out, i = b"", 0
    for n in sizes:
        part = body[i:i + n]
        i += n
        out += b"%x;ext=1\r\n%s\r\n" % (len(part), part)
    if i < len(body):
        out += b"%x\r\n%s\r\n" % (len(body) - i, body[i:])
    return out + b"0\r\nX-Trailer: t\r\n\r\n"


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def write(self, data: bytes) -> None:
        pass


def _feed(raw: bytes, cut: int) -> tuple[StreamExchange, asyncio.Future[None], _Conn]:
    """Feed `raw` to a connection `cut` bytes at a time (0: all at once); return what it parsed."""
    async def go() -> tuple[StreamExchange, asyncio.Future[None], _Conn]:
        conn = _Conn(WireClient("http://127.0.0.1:1"))
        conn.connection_made(_Transport())
        ex = StreamExchange(t_sent_unix=0.0)
        conn.ex, conn.t0, conn.done = ex, 0.0, asyncio.get_running_loop().create_future()
        step = cut or max(len(raw), 1)
        for i in range(0, len(raw), step):
            conn.data_received(raw[i:i + step])
        return ex, conn.done, conn

    return asyncio.run(go())


EVENTS = [b'{"choices":[{"delta":{"content":" a"}}]}', b'{"choices":[{"delta":{"content":" b"}}]}', b"[DONE]"]


@pytest.mark.parametrize("cut", [0, 1, 2, 3, 7, 64])
def test_chunked_sse_parses_the_same_at_every_cut(cut: int) -> None:
    body = _sse(*EVENTS)
    raw = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
           + _chunked(body, [5, 17, 1, 30]))
    ex, done, conn = _feed(raw, cut)
    assert done.done() and done.exception() is None
    assert ex.status == 200 and [d for _, d in ex.events] == EVENTS and ex.error is None
    assert conn.keep_alive and conn.state == "done"


def test_content_length_error_body_and_connection_close() -> None:
    body = b'{"error":{"message":"no slot"}}'
    raw = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    ex, done, conn = _feed(raw, 4)
    assert done.done() and ex.status == 503 and ex.error == 'HTTP 503: {"error":{"message":"no slot"}}'
    assert ex.events == [] and not conn.keep_alive  # never reused after "Connection: close"


def test_a_body_cut_mid_stream_is_an_error_not_a_short_success() -> None:
    body = _sse(*EVENTS)
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(body, [10])[:30]
    ex, done, conn = _feed(raw, 0)
    assert not done.done() and ex.status == 200
    conn.connection_lost(None)
    exc = done.exception()
    assert isinstance(exc, httpx.RemoteProtocolError) and "without sending complete message body" in str(exc)


def test_a_connection_closed_before_any_byte_says_no_response() -> None:
    _, done, conn = _feed(b"", 0)
    conn.connection_lost(None)
    exc = done.exception()
    assert isinstance(exc, httpx.RemoteProtocolError) and str(exc) == NO_RESPONSE


def test_garbage_is_a_protocol_error() -> None:
    _, done, _ = _feed(b"SSH-2.0-OpenSSH\r\n\r\n", 0)
    assert isinstance(done.exception(), httpx.RemoteProtocolError)


BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3,
                        "stream": True}


@pytest.mark.parametrize("closes, ok", [(1, True), (2, False)])
def test_a_stale_pooled_connection_is_resent_on_a_new_one(closes: int, ok: bool) -> None:
    # The scripted server closes the connection without a byte `closes` times, as llama-server does to a keep-alive
    # connection it dropped while idle. Once: the request goes out again on a new connection, marked resent.
    # Twice (the pooled one, then the new one): recorded as a failure, never sent a third time (a third send would
    # have been answered: the server closes only twice).
    with ScriptedServer(Script(ttft_s=0.0, itl_s=0.0, modes=deque(["close"] * closes))) as srv:
        async def go() -> StreamExchange:
            async with WireClient(srv.base_url) as client:
                await client.warm(1)
                return await send(client, f"{srv.base_url}/v1/chat/completions", json.dumps(BODY).encode(), 10.0)

        ex = asyncio.run(go())
        sent = len(srv.script.requests)
    assert ex.resent
    if ok:
        assert ex.status == 200 and ex.error is None and sent == 2 and len(ex.events) >= 3
    else:
        assert ex.status is None and ex.error is not None and "without sending a response" in ex.error
        assert sent == 2


def test_an_idle_connection_past_the_keep_alive_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "MAX_IDLE_S", 0.0)
    with ScriptedServer(Script(ttft_s=0.0, itl_s=0.0)) as srv:
        async def go() -> tuple[int, int]:
            async with WireClient(srv.base_url) as client:
                await client.warm(2)
                await send(client, f"{srv.base_url}/v1/chat/completions", BODY, 10.0)
                return len(client.conns), len(client.idle)

        conns, idle = asyncio.run(go())
    assert (conns, idle) == (1, 1)  # both warm ones were dropped as too old; the request opened a new one


def test_the_resend_goes_on_a_new_connection_not_another_idle_one() -> None:
    # Two idle connections; the first request's is closed unanswered. Its resend opens a new connection: the other
    # idle one may be just as stale. Wrong answer: the resend on the second idle one leaves one connection, not two.
    with ScriptedServer(Script(ttft_s=0.0, itl_s=0.0, modes=deque(["close"]))) as srv:
        async def go() -> tuple[StreamExchange, int, int]:
            async with WireClient(srv.base_url) as client:
                await client.warm(2)
                ex = await send(client, f"{srv.base_url}/v1/chat/completions", BODY, 10.0)
                return ex, len(client.conns), len(client.idle)

        ex, conns, idle = asyncio.run(go())
    assert ex.resent and ex.status == 200
    assert (conns, idle) == (2, 2)


def test_warm_replaces_idle_connections_too_old_to_reuse(monkeypatch: pytest.MonkeyPatch) -> None:
    # Wrong answer: counting the stale idle ones as warm leaves the next request to pay for a connect.
    with ScriptedServer(Script(ttft_s=0.0, itl_s=0.0)) as srv:
        async def go() -> tuple[int, int]:
            async with WireClient(srv.base_url) as client:
                await client.warm(2)
                old = set(client.idle)
                monkeypatch.setattr(wire, "MAX_IDLE_S", 0.0)
                await client.warm(2)
                return len(client.idle), len(old & set(client.idle))

        assert asyncio.run(go()) == (2, 0)


def test_https_is_spoken_over_tls_and_other_schemes_are_refused() -> None:
    tls = WireClient("https://127.0.0.1")
    assert tls.port == 443 and tls.tls is not None
    assert WireClient("http://127.0.0.1").port == 80 and WireClient("http://127.0.0.1").tls is None
    with pytest.raises(ValueError, match="http or https"):
        WireClient("ftp://127.0.0.1")
