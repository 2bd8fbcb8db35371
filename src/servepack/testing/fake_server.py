"""The one fake OpenAI/llama-server for tests and benchmarks (never the product).

Known TTFT and token schedule, an exact toy tokenizer, /props, /tokenize, /apply-template, /metrics, failure modes
(HTTP 500, a closed connection, a dropped stream, malformed SSE, a stall), and a `respond` hook that answers chat
requests with a given assistant message (tool calls included), non-streamed or as SSE deltas.
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

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
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
            return await self._reply(w, 200, json.dumps({"prompt": template(req["messages"][-1]["content"])}).encode())
        if path == "/metrics" and s.llama and s.metrics:
            text = (f"# HELP x\nllamacpp:prompt_tokens_total {sum(r['prompt_n'] for r in s.served)}\n"
                    f"llamacpp:tokens_predicted_total {sum(r['n'] for r in s.served)}\n"
                    f"llamacpp:requests_deferred {s.deferred}\n")
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
        prompt = template(req["messages"][-1]["content"]) if chat else req["prompt"]
        n_prompt = len(pieces(prompt))
        n = int(req.get("max_tokens") or req.get("n_predict") or 16) - s.short_by
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
        for i in range(n):
            delay = start + s.ttft_s + i * s.itl_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if mode == "stall" and i == 1:
                await asyncio.sleep(3600)
            if mode == "drop" and i == 2:
                w.transport.abort()
                return False
            if mode == "malformed" and i == 2:
                chunk(b"data: {not json\n\n")
            chunk(token)
            sent.append(time.perf_counter() - t0)
            await w.drain()
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


def main(argv: list[str] | None = None) -> None:
    """Serve in the foreground, answering llama-server's command line as well as its own.

    `python -m servepack.testing.fake_server --host 127.0.0.1 --port P [--ttft S] [--itl S]`; unknown llama-server
    flags (`--model`, `--ctx-size`, ...) are accepted and ignored; `--version` prints a llama.cpp-style version.
    FAKE_MODE (for lifecycle tests): healthy (503 twice, then 200), never_healthy, die_early, spawn_child,
    slow_start.
    """
    parser = argparse.ArgumentParser(prog="fake-llama-server", add_help=False)
    parser.add_argument("--version", action="store_true")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft", type=float, default=0.05)
    parser.add_argument("--itl", type=float, default=0.01)
    parser.add_argument("--parallel", type=int, default=1)  # llama-server's slots; -np is its short form
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
    script = Script(ttft_s=args.ttft, itl_s=args.itl, health_after=2, never_healthy=mode == "never_healthy",
                    build_info="b1-fake", slots=max(1, args.parallel))
    ScriptedServer(script, host=args.host, port=args.port).serve_forever()


if __name__ == "__main__":
    main()
