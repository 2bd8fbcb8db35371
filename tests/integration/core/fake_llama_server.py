"""A stand-in llama-server for lifecycle tests: answers --version, /health and /props; behaviour via env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = os.environ.get("FAKE_MODE", "healthy")
STATE = {"health_calls": 0}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt: str, *args: object) -> None:
        sys.stderr.write("fake: " + fmt % args + "\n")

    def _json(self, code: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            STATE["health_calls"] += 1
            if MODE == "never_healthy" or STATE["health_calls"] < 3:
                self._json(503, {"error": {"message": "Loading model"}})
            else:
                self._json(200, {"status": "ok"})
        elif self.path == "/props":
            self._json(200, {"build_info": "b1-fake", "total_slots": 1,
                             "default_generation_settings": {"n_ctx": 4096}})
        else:
            self._json(404, {})


def main() -> None:
    args = sys.argv[1:]
    if "--version" in args:
        print("version: 1 (abc1234)\nbuilt with fake for tests", file=sys.stderr)
        return
    port = int(args[args.index("--port") + 1])
    host = args[args.index("--host") + 1]
    print(f"fake llama-server argv: {args}", flush=True)
    if MODE == "die_early":
        print("error: failed to load model (fake)", flush=True)
        sys.exit(3)
    if MODE == "spawn_child":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"child pid {child.pid}", flush=True)
    if MODE == "slow_start":
        time.sleep(0.5)
    ThreadingHTTPServer((host, port), Handler).serve_forever()


if __name__ == "__main__":
    main()
