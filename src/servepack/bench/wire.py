"""The HTTP/1.1 client every load request goes out on (bench cells and capacity points alike): keep-alive
connections on a free list, the response parsed in the protocol.

httpx's pool scans every connection it holds each time a request is assigned (and polls each idle socket to see if
it expired): with hundreds of connections a send costs milliseconds of CPU, and the open loop fell behind its own
schedule at 50 requests a second on two cores. Here a request takes an idle connection off a list (or opens one),
writes its request line and body in one call, and the response is parsed as bytes arrive, in `data_received`:
status line and headers, then the body by Content-Length, chunked encoding, or until the connection closes. Every
`data:` line of an SSE body is timestamped with the arrival of the bytes that completed it. An https URL is spoken
over TLS (the system's default verification).

Failures are raised as httpx's exception types, and `client.send` records them in words: a connection that closes
before any response byte raises `RemoteProtocolError("Server disconnected without sending a response.")` (the one
case `send` sends again, once, on a new connection: `stream(..., fresh=True)`), a refused connection
`ConnectError`, a stream cut mid-body `RemoteProtocolError`.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections import deque
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

NO_RESPONSE = "Server disconnected without sending a response."
_MAX_HEAD = 64 * 1024
# An idle keep-alive connection older than this is closed, not reused: llama-server (cpp-httplib) closes its
# side after 5 s idle, and a request written as it does so is lost without a response.
MAX_IDLE_S = 4.0


class ResponseSink(Protocol):
    """What a response is read into (`client.StreamExchange`; named here so this module need not import that one)."""

    status: int | None
    events: list[tuple[float, bytes]]
    headers_s: float | None
    end_s: float | None
    error: str | None
    wire_s: float | None
    last_byte_s: float | None
    resent: bool


class _Conn(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self, pool: WireClient) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.busy = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.ex: ResponseSink | None = None
        self.t0 = 0.0
        self.done: asyncio.Future[None] | None = None
        self.buf = bytearray()
        self.state = "head"  # head → body (length | chunked | close) → done
        self.status: int | None = None
        self.keep_alive = True
        self.remaining = 0
        self.chunk_left = -1  # chunked: bytes left of the current chunk; -1: reading a size line; -2: trailers
        self.body_mode = "length"
        self.line = b""  # SSE: the part of a line not yet ended
        self.raw = bytearray()  # a non-200 body, for its error message
        self.got_byte = False

    # -- asyncio.Protocol -------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.done is None or self.done.done():
            return
        if self.state == "body" and self.body_mode == "close":
            self._finish()
            return
        if not self.got_byte:
            self.done.set_exception(httpx.RemoteProtocolError(NO_RESPONSE))
        else:
            why = f" ({exc})" if exc else ""
            self.done.set_exception(httpx.RemoteProtocolError(
                f"peer closed connection without sending complete message body{why}"))

    def data_received(self, data: bytes) -> None:
        if self.done is None or self.done.done():
            # Bytes after the response (or on an idle connection): the exchange is broken; never reuse it.
            self.keep_alive = False
            if not self.busy and self.transport is not None:
                self.transport.abort()
                self.closed = True
            return
        now = time.perf_counter() - self.t0
        self.got_byte = True
        ex = self.ex
        assert ex is not None
        ex.last_byte_s = now
        try:
            if self.state == "head":
                self.buf += data
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(self.buf) > _MAX_HEAD:
                        raise httpx.RemoteProtocolError("response headers over 64 KiB")
                    return
                self._head(bytes(self.buf[:end]), now)
                rest = bytes(self.buf[end + 4:])
                self.buf = bytearray()
                self.state = "body"
                if self.body_mode == "length" and self.remaining == 0:
                    self._finish()
                    return
                if not rest:
                    return
                data = rest
            if self.state == "body":
                self._body(data, now)
        except httpx.RemoteProtocolError as exc:
            self.keep_alive = False
            if not self.done.done():
                self.done.set_exception(exc)

    # -- parsing ----------------------------------------------------------------------------------------------

    def _head(self, head: bytes, now: float) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise httpx.RemoteProtocolError(f"not an HTTP response: {lines[0][:80]!r}")
        try:
            self.status = int(parts[1])
        except ValueError:
            raise httpx.RemoteProtocolError(f"bad status line: {lines[0][:80]!r}") from None
        length: int | None = None
        chunked = False
        self.keep_alive = parts[0] != b"HTTP/1.0"
        for ln in lines[1:]:
            name, _, value = ln.partition(b":")
            key = name.strip().lower()
            if key == b"content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    raise httpx.RemoteProtocolError(f"bad Content-Length: {value[:40]!r}") from None
            elif key == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif key == b"connection":
                v = value.strip().lower()
                if v == b"close":
                    self.keep_alive = False
                elif v == b"keep-alive":
                    self.keep_alive = True
        if chunked:
            self.body_mode = "chunked"
        elif length is not None:
            self.body_mode, self.remaining = "length", length
        else:
            self.body_mode, self.keep_alive = "close", False
        ex = self.ex
        assert ex is not None
        ex.status = self.status
        ex.headers_s = now

    def _body(self, data: bytes, now: float) -> None:
        if self.body_mode == "length":
            take = data[:self.remaining]
            self.remaining -= len(take)
            self._content(take, now)
            if self.remaining <= 0:
                self._finish()
            return
        if self.body_mode == "close":
            self._content(data, now)
            return
        buf = self.buf
        buf += data
        pos = 0
        n = len(buf)
        while pos < n:
            if self.chunk_left > 0:
                k = min(self.chunk_left, n - pos)
                self._content(bytes(buf[pos:pos + k]), now)
                pos += k
                self.chunk_left -= k
                if self.chunk_left == 0:
                    self.chunk_left = -3  # the CRLF after a chunk's data
                continue
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            line = bytes(buf[pos:end])
            pos = end + 2
            if self.chunk_left == -3:  # the CRLF that closes a chunk
                if line:
                    raise httpx.RemoteProtocolError("chunk data longer than its size")
                self.chunk_left = -1
            elif self.chunk_left == -1:
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise httpx.RemoteProtocolError(f"bad chunk size line: {line[:40]!r}") from None
                self.chunk_left = size if size > 0 else -2
            elif self.chunk_left == -2:  # trailers until an empty line
                if not line:
                    del buf[:pos]
                    self._finish()
                    return
        del buf[:pos]

    def _content(self, data: bytes, now: float) -> None:
        if not data:
            return
        ex = self.ex
        assert ex is not None
        if self.status != 200:
            self.raw += data
            return
        if b"\n" not in data:
            self.line += data
            return
        *lines, self.line = (self.line + data).split(b"\n")
        events = ex.events
        for line in lines:
            if line.startswith(b"data:"):
                events.append((now, line[5:].strip()))

    def _finish(self) -> None:
        ex = self.ex
        assert ex is not None and self.done is not None
        now = time.perf_counter() - self.t0
        if self.status == 200:
            if self.line.startswith(b"data:"):
                ex.events.append((now, self.line[5:].strip()))
        else:
            ex.error = f"HTTP {self.status}: {bytes(self.raw[:200]).decode('utf-8', errors='replace').strip()}"
        ex.end_s = now
        self.state = "done"
        if not self.done.done():
            self.done.set_result(None)


class WireClient:
    """Keep-alive connections to one loopback server, taken from and returned to a free list."""

    def __init__(self, base_url: str, *, connect_timeout_s: float = 10.0) -> None:
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"{base_url!r}: the load generator speaks http or https to a loopback server")
        self.host, self.port = u.hostname, u.port or (443 if u.scheme == "https" else 80)
        self.tls = ssl.create_default_context() if u.scheme == "https" else None
        self.host_header = f"{self.host}:{self.port}".encode()
        self.connect_timeout_s = connect_timeout_s
        self.idle: deque[_Conn] = deque()
        self.conns: set[_Conn] = set()

    async def _open(self) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Conn(self), self.host, self.port, ssl=self.tls,
                                       server_hostname=self.host if self.tls else None),
                self.connect_timeout_s)
        except asyncio.TimeoutError:
            raise httpx.ConnectTimeout(f"no connection to {self.host}:{self.port} within "
                                       f"{self.connect_timeout_s:g} s") from None
        except OSError as exc:
            raise httpx.ConnectError(f"{self.host}:{self.port}: {exc}") from None
        self.conns.add(conn)
        return conn

    async def _take(self, fresh: bool = False) -> _Conn:
        """An idle connection (the most recently used), or a new one (always, when `fresh`)."""
        now = time.monotonic()
        while self.idle and not fresh:
            conn = self.idle.pop()
            if not conn.closed and now - conn.idle_since < MAX_IDLE_S:
                return conn
            self._drop(conn)
        return await self._open()

    def _give(self, conn: _Conn) -> None:
        conn.busy = False
        if conn.closed or not conn.keep_alive or conn.state != "done":
            self._drop(conn)
            return
        conn._reset()
        conn.idle_since = time.monotonic()
        self.idle.append(conn)

    def _drop(self, conn: _Conn) -> None:
        self.conns.discard(conn)
        if conn.transport is not None and not conn.closed:
            conn.transport.abort()
        conn.closed = True

    async def warm(self, n: int) -> None:
        """Have `n` idle connections open ahead of a point or a cell's rounds (a connect is no part of a request's
        lag): the idle ones too old to reuse are closed first, then as many opened as are missing."""
        now = time.monotonic()
        for conn in [c for c in self.idle if c.closed or now - c.idle_since >= MAX_IDLE_S]:
            self.idle.remove(conn)
            self._drop(conn)
        need = max(0, n - len(self.idle))
        opened = await asyncio.gather(*(self._open() for _ in range(need)), return_exceptions=True)
        for c in opened:
            if isinstance(c, _Conn):
                c.idle_since = time.monotonic()
                self.idle.append(c)

    def request_bytes(self, path: str, body: dict[str, Any] | bytes) -> bytes:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: " + self.host_header
                + b"\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: "
                + str(len(payload)).encode() + b"\r\n\r\n" + payload)

    async def stream(self, url: str, body: dict[str, Any] | bytes, ex: ResponseSink, t0: float, *,
                     fresh: bool = False) -> None:
        """Send one POST and read its response into `ex` (times from `t0`, perf_counter); on a new connection,
        not an idle one, when `fresh`."""
        path = url if url.startswith("/") else (urlsplit(url).path or "/")
        conn = await self._take(fresh)
        await self._exchange(conn, self.request_bytes(path, body), ex, t0)

    async def _exchange(self, conn: _Conn, data: bytes, ex: ResponseSink, t0: float) -> None:
        conn.busy = True
        conn.ex, conn.t0 = ex, t0
        conn.done = asyncio.get_running_loop().create_future()
        try:
            assert conn.transport is not None
            ex.wire_s = time.perf_counter() - t0
            conn.transport.write(data)
            await conn.done
        except BaseException:
            conn.keep_alive = False
            raise
        finally:
            self._give(conn)

    async def aclose(self) -> None:
        for conn in list(self.conns):
            self._drop(conn)
        self.idle.clear()
        await asyncio.sleep(0)

    async def __aenter__(self) -> WireClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
