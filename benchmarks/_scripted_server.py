"""A scripted llama-server look-alike for tests and benchmarks (never the product): known TTFT and token
schedule, exact toy tokenizer, /metrics, and failure modes (HTTP 500, dropped stream, malformed SSE, stall).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

_PIECE = re.compile(r"\s*\S+|\s+")


def pieces(text: str) -> list[str]:
    return _PIECE.findall(text)


def template(content: str) -> str:
    return f"<|user|>\n{content}\n<|assistant|>\n"


@dataclass
class Script:
    """How the fake behaves. `modes` is consumed one per generation request; empty means "ok"."""

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


class ScriptedServer:
    """Serve on 127.0.0.1:<free port> from a background thread: `with ScriptedServer(script) as srv:`."""

    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.sock = sock
        self.port = sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
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
        reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}.get(status, "X")
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
                     .encode() + body)
        await writer.drain()
        return True

    async def _route(self, method: str, path: str, req: dict[str, Any], w: asyncio.StreamWriter, t0: float) -> bool:
        s = self.script
        if path == "/health":
            return await self._reply(w, 200, b'{"status":"ok"}')
        if path == "/props" and s.llama:
            return await self._reply(w, 200, json.dumps({"default_generation_settings": {"n_ctx": 4096},
                                                         "total_slots": 1, "build_info": "scripted"}).encode())
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

    async def _generate(self, path: str, req: dict[str, Any], w: asyncio.StreamWriter, t0: float) -> bool:
        s = self.script
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


def main() -> None:
    """`python _scripted_server.py PORT TTFT_S ITL_S`: serve in the foreground (benchmarks run it apart)."""
    import sys

    port, ttft, itl = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    srv = ScriptedServer(Script(ttft_s=ttft, itl_s=itl))
    srv.sock.close()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    srv.sock = sock
    srv.serve_forever()


if __name__ == "__main__":
    main()
