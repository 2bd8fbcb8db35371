"""The one fake OpenAI/llama-server for tests and benchmarks (never the product).

Known TTFT and token schedule, an exact toy tokenizer, /props, /tokenize, /apply-template, /metrics, failure modes
(HTTP 500, a closed connection, a dropped stream, malformed SSE, a stall), and a `respond` hook that answers chat
requests with a given assistant message (tool calls included), non-streamed or as SSE deltas.

Capacity is scriptable (`Script.queue`): `slots` requests generate at once, the rest wait in a FIFO queue (their
TTFT grows with it, as llama-server's deferred requests do), each busy slot decodes at 1 ÷ `itl_s` tokens a second
slowed by `slowdown` per other busy slot (compute shared), and prefill costs `prefill_s_per_token` per uncached
prompt token. With `prefix_cache`, a request that sends `cache_prompt` reuses its longest common prefix with an
earlier prompt and reports it as `timings.cache_n`. `die_after` stops answering after that many generation
requests (every connection cut, the port closed), like a server that died. `freeze` stops the whole server for
a while at a given token of a given generation request, answering nothing meanwhile (/health included), as a
SIGSTOP of llama-server does. `host_spin` makes the serving thread itself the bottleneck: every token after the
first costs `itl_s` of busy CPU on the one event-loop thread, so all streams share one core (a single-threaded
host loop, as llama-server's main thread is when the GPU waits on it).

State that carries over is scriptable too: with `carry_s_per_served` every request served before adds that much to
a later request's prefill (a host prompt cache that each finished request fills and every new one searches, as
llama-server's `--cache-ram` does), so a heavy point slows the points after it; `linger_s` keeps a finished
request's slot processing (in /slots and /metrics) that much longer, so a server is not at rest the moment the
last byte is sent. `/slots` lists every slot's `is_processing` (off with `slots_endpoint=False`, as
`--no-slots`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_PIECE = re.compile(r"\s*\S+|\s+")


def pieces(text: str) -> list[str]:
    return _PIECE.findall(text)


def template(content: str) -> str:
    return f"<|user|>\n{content}\n<|assistant|>\n"


def render(messages: list[dict[str, Any]]) -> str:
    """The toy chat template over a whole conversation; one user message renders as `template(content)`."""
    turns = "".join(f"<|{m.get('role', 'user')}|>\n{m.get('content') or ''}\n" for m in messages)
    return f"{turns}<|assistant|>\n"


def common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class Reply:
    """A whole HTTP reply a `respond` hook can return instead of an assistant message."""

    status: int
    body: dict[str, Any]


Responder = Callable[[dict[str, Any]], dict[str, Any] | Reply | None]


def _parts(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def sse_chunks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """Chat-completion SSE chunks for an assistant message: content in 7-character pieces, then tool calls, their
    arguments in 5-character pieces sent round-robin across calls (so a client must reassemble by index)."""
    out: list[dict[str, Any]] = [{"id": "chatcmpl-fake", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    content = message.get("content")
    for piece in _parts(content, 7) if isinstance(content, str) and content else []:
        out.append({"choices": [{"index": 0, "delta": {"content": piece}}]})
    calls = message.get("tool_calls") or []
    for i, c in enumerate(calls):
        head = {"index": i, "id": c.get("id"), "type": "function",
                "function": {"name": c["function"]["name"], "arguments": ""}}
        out.append({"choices": [{"index": 0, "delta": {"tool_calls": [head]}}]})
    pieces_by_call = [_parts(str(c["function"].get("arguments", "")), 5) for c in calls]
    for step in range(max((len(p) for p in pieces_by_call), default=0)):
        for i, p in enumerate(pieces_by_call):
            if step < len(p):
                delta = {"index": i, "function": {"arguments": p[step]}}
                out.append({"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]})
    finish = "tool_calls" if calls else "stop"
    out.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return out


@dataclass
class Script:
    """How the fake behaves. `modes` is consumed one per generation request; empty means "ok".

    `respond`, when set, answers every chat request: an assistant message (streamed as `sse_chunks` when asked),
    a `Reply` (status and JSON body), or None for an HTTP 500. `health_after` answers /health with 503
    ("Loading model") that many times first; `never_healthy` keeps answering 503.
    """

    ttft_s: float = 0.05
    itl_s: float = 0.01
    llama: bool = True
    metrics: bool = True
    cache_n: int = 0
    deferred: float = 0.0
    short_by: int = 0
    strict_openai: bool = False
    modes: deque[str] = field(default_factory=deque)
    served: list[dict[str, Any]] = field(default_factory=list)
    respond: Responder | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    health_after: int = 0
    never_healthy: bool = False
    build_info: str = "scripted"
    health_calls: int = 0
    slots: int = 1
    # Capacity (see the module doc): off by default, so the scripted timing stays exact for every other test.
    queue: bool = False
    slowdown: float = 0.0
    prefill_s_per_token: float = 0.0
    prefix_cache: bool = False
    die_after: int | None = None
    on_die: Callable[[], None] | None = None  # what dying does besides no more answers (a process: it exits)
    host_spin: bool = False
    # (generation request number from 1, token index from 0, seconds): before sending that token the whole server
    # stops answering for that long, /health and new connections included (a SIGSTOP; index 0: during prefill).
    freeze: tuple[int, int, float] | None = None
    # The inter-token time of a generation request by its number (from 1), instead of `itl_s`: a scripted slow spell.
    itl_for: Callable[[int], float] | None = None
    # A request whose client left mid-stream is generated to its end (counted in /metrics requests_processing),
    # as llama-server does; the unix time each such request ended goes to `cut_finished`.
    finish_cut: bool = False
    cut_finished: list[float] = field(default_factory=list)
    # The next N /apply-template requests for a conversation (more than one message) get their connection closed
    # with no response (a pooled keep-alive connection the server already dropped, as llama-server sometimes does).
    close_apply_template: int = 0
    # State that carries over (see the module doc).
    carry_s_per_served: float = 0.0
    linger_s: float = 0.0
    slots_endpoint: bool = True
    lingering: int = 0
    busy: int = 0
    busy_max: int = 0
    waiting_max: int = 0
    generations: int = 0
    dead: bool = False


class ScriptedServer:
    """Serve on 127.0.0.1:<free port> from a background thread: `with ScriptedServer(script) as srv:`."""

    def __init__(self, script: Script | None = None, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.script = script or Script()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        self.sock = sock
        self.port = sock.getsockname()[1]
        self.base_url = f"http://{host}:{self.port}"
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._started = threading.Event()
        self._server: asyncio.AbstractServer | None = None
        self._slots: asyncio.Semaphore | None = None
        self._waiting = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._prompts: deque[list[str]] = deque(maxlen=256)
        self._frozen_until = 0.0

    async def _freeze(self, generation: int, token: int) -> None:
        """Stop everything for the scripted time if this is the scripted token (see `Script.freeze`)."""
        f = self.script.freeze
        if f is not None and f[0] == generation and f[1] == token:
            self._frozen_until = self.loop.time() + f[2]
            await asyncio.sleep(f[2])

    async def _thawed(self) -> None:
        while (left := self._frozen_until - self.loop.time()) > 0:
            await asyncio.sleep(left)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._server = self.loop.run_until_complete(asyncio.start_server(self._handle, sock=self.sock))
        self._started.set()
        self.loop.run_forever()

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def serve_forever(self) -> None:
        self._serve()

    def _die(self) -> None:
        """Stop answering: close the port and cut every open connection, mid-stream ones included."""
        self.script.dead = True
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.transport.abort()
        if self.script.on_die is not None:
            self.script.on_die()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # The listening socket was made with proto 0, so asyncio did not set TCP_NODELAY on what it accepts:
            # without it, Nagle holds a token behind an unacknowledged one until the client's delayed ACK (~40 ms).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if self.script.dead:
                    writer.transport.abort()
                    break
                t_recv = time.perf_counter()
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                keep = await self._route(method, path, json.loads(body) if body else {}, writer, t_recv)
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str = "application/json") -> bool:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error",
                  503: "Service Unavailable"}.get(status, "X")
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
                     .encode() + body)
        await writer.drain()
        return True

    async def _route(self, method: str, path: str, req: dict[str, Any], w: asyncio.StreamWriter, t0: float) -> bool:
        s = self.script
        await self._thawed()
        if path == "/health":
            s.health_calls += 1
            if s.never_healthy or s.health_calls <= s.health_after:
                return await self._reply(w, 503, b'{"error":{"message":"Loading model"}}')
            return await self._reply(w, 200, b'{"status":"ok"}')
        if path == "/v1/models":
            return await self._reply(w, 200, b'{"object":"list","data":[{"id":"scripted","object":"model"}]}')
        if path == "/props" and s.llama:
            return await self._reply(w, 200, json.dumps({"default_generation_settings": {"n_ctx": 4096},
                                                         "total_slots": s.slots, "build_info": s.build_info}).encode())
        if path == "/tokenize" and s.llama:
            ps = pieces(req.get("content", ""))
            toks: list[Any] = [{"id": i, "piece": p} for i, p in enumerate(ps)] if req.get("with_pieces") else \
                list(range(len(ps)))
            return await self._reply(w, 200, json.dumps({"tokens": toks}).encode())
        if path == "/apply-template" and s.llama:
            if s.close_apply_template > 0 and len(req.get("messages") or []) > 1:
                s.close_apply_template -= 1
                return False
            return await self._reply(w, 200, json.dumps({"prompt": render(req["messages"])}).encode())
        if path == "/slots" and s.llama and s.slots_endpoint:
            processing = s.busy + s.lingering
            return await self._reply(w, 200, json.dumps([{"id": i, "is_processing": i < processing}
                                                          for i in range(max(s.slots, processing))]).encode())
        if path == "/metrics" and s.llama and s.metrics:
            text = (f"# HELP x\nllamacpp:prompt_tokens_total {sum(r['prompt_n'] for r in s.served)}\n"
                    f"llamacpp:tokens_predicted_total {sum(r['n'] for r in s.served)}\n"
                    f"llamacpp:requests_processing {s.busy + s.lingering}\n"
                    f"llamacpp:requests_deferred {self._waiting if s.queue else s.deferred}\n")
            return await self._reply(w, 200, text.encode(), "text/plain; version=0.0.4")
        if path in ("/v1/chat/completions", "/completion") and method == "POST":
            return await self._generate(path, req, w, t0)
        return await self._reply(w, 404, b'{"error":"not found"}')

    async def _respond(self, req: dict[str, Any], w: asyncio.StreamWriter) -> bool:
        assert self.script.respond is not None
        answer = self.script.respond(req)
        if answer is None:
            return await self._reply(w, 500, b'{"error":{"code":500,"message":"scripted failure"}}')
        if isinstance(answer, Reply):
            return await self._reply(w, answer.status, json.dumps(answer.body).encode())
        if not req.get("stream"):
            finish = "tool_calls" if answer.get("tool_calls") else "stop"
            body = {"id": "chatcmpl-fake", "object": "chat.completion", "model": req.get("model"),
                    "choices": [{"index": 0, "message": answer, "finish_reason": finish}]}
            return await self._reply(w, 200, json.dumps(body).encode())
        events = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in sse_chunks(answer))
        return await self._reply(w, 200, events + b"data: [DONE]\n\n", "text/event-stream")

    async def _generate(self, path: str, req: dict[str, Any], w: asyncio.StreamWriter, t0: float) -> bool:
        s = self.script
        s.requests.append(req)
        if s.respond is not None and path == "/v1/chat/completions":
            return await self._respond(req, w)
        mode = s.modes.popleft() if s.modes else "ok"
        if mode == "500":
            return await self._reply(w, 500, b'{"error":{"code":500,"message":"scripted failure"}}')
        if mode == "close":
            return False  # not a byte back: what a server does to a keep-alive connection it closed while idle
        if s.strict_openai and "ignore_eos" in req:
            return await self._reply(w, 400, b'{"error":{"message":"Unrecognized request argument: ignore_eos"}}')
        if not req.get("stream", False):
            return await self._reply(w, 200, json.dumps({"choices": [{"message": {"content": "ok"}}]}).encode())
        chat = path.startswith("/v1")
        capacity = s.queue or s.prefix_cache or s.host_spin or bool(s.carry_s_per_served) or bool(s.linger_s)
        prompt = (render(req["messages"]) if capacity else template(req["messages"][-1]["content"])) if chat \
            else req["prompt"]
        prompt_pieces = pieces(prompt)
        n_prompt = len(prompt_pieces)
        n = int(req.get("max_tokens") or req.get("n_predict") or 16) - s.short_by
        s.generations += 1
        generation = s.generations
        if s.die_after is not None and s.generations > s.die_after:
            self._die()
            return False
        if capacity:
            return await self._generate_slot(chat, req, prompt_pieces, n, w, t0, mode)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        def chunk(payload: bytes) -> None:
            w.write(b"%x\r\n%s\r\n" % (len(payload), payload))

        def event(obj: dict[str, Any]) -> bytes:
            return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

        loop = asyncio.get_running_loop()
        start = loop.time() - (time.perf_counter() - t0)
        if chat:
            chunk(event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}))
            await w.drain()
        token = event({"choices": [{"index": 0, "delta": {"content": " tok"}}]}) if chat else \
            event({"content": " tok", "stop": False})
        sent: list[float] = []
        itl = s.itl_for(generation) if s.itl_for is not None else s.itl_s
        cut = False
        s.busy += 1
        try:
            for i in range(n):
                delay = start + s.ttft_s + i * itl - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                await self._freeze(generation, i)
                if mode == "stall" and i == 1:
                    await asyncio.sleep(3600)
                if mode == "drop" and i == 2:
                    w.transport.abort()
                    return False
                if mode == "malformed" and i == 2:
                    chunk(b"data: {not json\n\n")
                if cut:
                    continue  # generating on for a client that left, as llama-server does until it next sends
                chunk(token)
                sent.append(time.perf_counter() - t0)
                try:
                    await w.drain()
                except ConnectionError:
                    if not s.finish_cut:
                        raise
                    cut = True
        finally:
            s.busy -= 1
        if cut:
            s.cut_finished.append(time.time())
            return False
        first, last = sent[0], sent[-1]
        timings = {"cache_n": s.cache_n, "prompt_n": n_prompt - s.cache_n, "prompt_ms": first * 1000,
                   "predicted_n": n, "predicted_ms": (last - first) * 1000,
                   "predicted_per_second": (n - 1) / (last - first) if n > 1 and last > first else None}
        s.served.append({"prompt_n": n_prompt, "n": n, "ttft_s": first,
                         "decode_tok_s": timings["predicted_per_second"]})
        if not s.llama:
            timings = {}
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n, "total_tokens": n_prompt + n,
                 "prompt_tokens_details": {"cached_tokens": s.cache_n}}
        if chat:
            chunk(event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
            final: dict[str, Any] = {"choices": [], "usage": usage}
            if timings:
                final["timings"] = timings
            chunk(event(final) + b"data: [DONE]\n\n")
        else:
            chunk(event({"content": "", "stop": True, "stop_type": "limit", "tokens_evaluated": n_prompt,
                         "tokens_predicted": n, "timings": timings}))
        chunk(b"")
        await w.drain()
        return True

    def _cached(self, req: dict[str, Any], prompt: list[str]) -> int:
        """Prompt pieces reused from an earlier prompt (llama-server keeps one at most n_prompt − 1)."""
        s = self.script
        if not s.prefix_cache:
            return s.cache_n
        hit = 0
        if req.get("cache_prompt", True) is not False:
            hit = max((common_prefix(p, prompt) for p in self._prompts), default=0)
        self._prompts.append(prompt)
        return min(hit, max(len(prompt) - 1, 0))

    async def _generate_slot(self, chat: bool, req: dict[str, Any], prompt: list[str], n: int,
                             w: asyncio.StreamWriter, t0: float, mode: str) -> bool:
        """Scripted capacity: wait for one of `slots`, prefill the uncached part, decode at the shared rate."""
        s = self.script
        if self._slots is None:  # prefix cache alone: no queue
            self._slots = asyncio.Semaphore(max(1, s.slots) if s.queue else 1 << 20)
        self._waiting += 1
        s.waiting_max = max(s.waiting_max, self._waiting)

        def chunk(payload: bytes) -> None:
            w.write(b"%x\r\n%s\r\n" % (len(payload), payload))

        def event(obj: dict[str, Any]) -> bytes:
            return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

        loop = asyncio.get_running_loop()
        async with self._slots:
            self._waiting -= 1
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            if chat:
                chunk(event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}))
            s.busy += 1
            s.busy_max = max(s.busy_max, s.busy)
            try:
                cached = self._cached(req, prompt)
                start = loop.time()
                due = start + s.ttft_s + s.prefill_s_per_token * (len(prompt) - cached) \
                    + s.carry_s_per_served * len(s.served)
                token = event({"choices": [{"index": 0, "delta": {"content": " tok"}}]}) if chat else \
                    event({"content": " tok", "stop": False})
                sent: list[float] = []
                for i in range(n):
                    if s.host_spin and i > 0:
                        _spin(s.itl_s)  # this token's work, on the one serving thread
                        await asyncio.sleep(0)  # then every other stream's turn
                    else:
                        delay = due - loop.time()
                        if delay > 0:
                            await asyncio.sleep(delay)
                    if mode == "drop" and i == 2:
                        w.transport.abort()
                        return False
                    chunk(token)
                    sent.append(time.perf_counter() - t0)
                    await w.drain()
                    # Decode starts when the first token is out (a late first token does not squeeze the gaps
                    # after it); from there each token is due one shared inter-token time after the last was due.
                    if i == 0:
                        due = loop.time()
                    due += s.itl_s * (1 + s.slowdown * (s.busy - 1))
            finally:
                s.busy -= 1
                if s.linger_s > 0:  # the slot stays processing a while after its last byte
                    s.lingering += 1
                    loop.call_later(s.linger_s, self._unlinger)
        first, last = sent[0], sent[-1]
        timings = {"cache_n": cached, "prompt_n": len(prompt) - cached, "prompt_ms": first * 1000,
                   "predicted_n": n, "predicted_ms": (last - first) * 1000,
                   "predicted_per_second": (n - 1) / (last - first) if n > 1 and last > first else None}
        s.served.append({"prompt_n": len(prompt), "n": n, "ttft_s": first, "cache_n": cached,
                         "decode_tok_s": timings["predicted_per_second"]})
        usage = {"prompt_tokens": len(prompt), "completion_tokens": n, "total_tokens": len(prompt) + n,
                 "prompt_tokens_details": {"cached_tokens": cached}}
        if chat:
            chunk(event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
            chunk(event({"choices": [], "usage": usage, "timings": timings}) + b"data: [DONE]\n\n")
        else:
            chunk(event({"content": "", "stop": True, "stop_type": "limit", "tokens_evaluated": len(prompt),
                         "tokens_predicted": n, "timings": timings}))
        chunk(b"")
        await w.drain()
        return True

    def _unlinger(self) -> None:
        self.script.lingering -= 1


def _spin(seconds: float) -> None:
    """Busy for `seconds` of this thread's CPU time (on a busy host it takes longer, as real work would)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def main(argv: list[str] | None = None) -> None:
    """Serve in the foreground, answering llama-server's command line as well as its own.

    `python -m servepack.testing.fake_server --host 127.0.0.1 --port P [--ttft S] [--itl S]`; unknown llama-server
    flags (`--model`, `--ctx-size`, ...) are accepted and ignored; `--version` prints a llama.cpp-style version.
    FAKE_MODE (for lifecycle tests): healthy (503 twice, then 200), never_healthy, die_early, spawn_child,
    slow_start. FAKE_FREEZE="G,I,S" sets `Script.freeze` (generation G, token I, S seconds).
    """
    parser = argparse.ArgumentParser(prog="fake-llama-server", add_help=False)
    parser.add_argument("--version", action="store_true")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft", type=float, default=0.05)
    parser.add_argument("--itl", type=float, default=0.01)
    parser.add_argument("--parallel", type=int, default=1)  # llama-server's slots; -np is its short form
    parser.add_argument("--queue", action="store_true", help="scripted capacity: --parallel slots, then a queue")
    parser.add_argument("--slowdown", type=float, default=0.0)
    parser.add_argument("--prefill-per-token", type=float, default=0.0)
    parser.add_argument("--prefix-cache", action="store_true")
    parser.add_argument("--host-spin", action="store_true", help="each token is --itl of busy CPU on one thread")
    parser.add_argument("--carry-per-served", type=float, default=0.0,
                        help="seconds each served request adds to later prefills (off with --cache-ram 0)")
    parser.add_argument("--cache-ram", type=int, default=8192)  # llama-server's; 0 turns the scripted carry off
    parser.add_argument("--linger", type=float, default=0.0, help="a slot stays processing this long after a reply")
    given = sys.argv[1:] if argv is None else argv
    args, _ = parser.parse_known_args(["--parallel" if a == "-np" else a for a in given])
    if args.version:
        print("version: 1 (abc1234)\nbuilt with fake for tests", file=sys.stderr)
        return
    mode = os.environ.get("FAKE_MODE", "healthy")
    print(f"fake llama-server argv: {sys.argv[1:] if argv is None else argv}", flush=True)
    if mode == "die_early":
        print("error: failed to load model (fake)", flush=True)
        sys.exit(3)
    if mode == "spawn_child":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"child pid {child.pid}", flush=True)
    if mode == "slow_start":
        time.sleep(0.5)
    if mode == "exit_on_generation":  # healthy, then the process exits at its first generation request
        def crash() -> None:
            print("fake: exiting at the first generation request (FAKE_MODE=exit_on_generation)", flush=True)
            os._exit(9)
    script = Script(ttft_s=args.ttft, itl_s=args.itl, health_after=2, never_healthy=mode == "never_healthy",
                    build_info="b1-fake", slots=max(1, args.parallel), queue=args.queue, slowdown=args.slowdown,
                    prefill_s_per_token=args.prefill_per_token, prefix_cache=args.prefix_cache,
                    host_spin=args.host_spin, linger_s=args.linger,
                    carry_s_per_served=args.carry_per_served if args.cache_ram != 0 else 0.0)
    if mode == "exit_on_generation":
        script.die_after, script.on_die = 0, crash
    if freeze := os.environ.get("FAKE_FREEZE"):
        g, i, secs = freeze.split(",")
        script.freeze = (int(g), int(i), float(secs))
    ScriptedServer(script, host=args.host, port=args.port).serve_forever()


if __name__ == "__main__":
    main()
