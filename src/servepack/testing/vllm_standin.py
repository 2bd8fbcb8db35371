"""A stand-in `vllm` executable for tests (never the product): vLLM cannot be installed where servepack is tested.

`python -m servepack.testing.vllm_standin serve MODEL [flags]` parses the `vllm serve` flags servepack emits
(names and value types as vLLM's engine-argument reference documents them; others are kept as pass-through),
writes what it parsed to $VLLM_STANDIN_RECORD (JSON), starts one worker child process (as vLLM does, so process
tree teardown can be tested), and serves the shared fake OpenAI API (`servepack.testing.fake_server`) with
/v1/models listing the served name. `--version` prints a version line.

VLLM_STANDIN_MODE: ok (default), exit1 (fails before serving), never_healthy (/health answers 503),
wrong_name (/v1/models lists another model).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from servepack.testing.fake_server import Script, ScriptedServer

VERSION = "0.0.0+servepack.standin"
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
EXECUTORS = ("ray", "mp", "uni", "external_launcher")


class StandinServer(ScriptedServer):
    """The shared fake server, with /v1/models listing the names vLLM would serve."""

    def __init__(self, names: list[str], script: Script, *, host: str, port: int) -> None:
        super().__init__(script, host=host, port=port)
        self.names = names

    async def _route(self, method: str, path: str, req: dict[str, Any], w: Any, t0: float) -> bool:
        if path == "/v1/models":
            body = {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "vllm"} for n in self.names]}
            return await self._reply(w, 200, json.dumps(body).encode())
        if path.startswith("/v1/") and method == "POST" and req.get("model") not in self.names:
            # as vLLM does: a request for a model it does not serve is refused
            error = {"object": "error", "message": f"The model `{req.get('model')}` does not exist.", "code": 404}
            return await self._reply(w, 404, json.dumps(error).encode())
        return await super()._route(method, path, req, w, t0)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm serve", add_help=False, allow_abbrev=False)
    p.add_argument("model")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--revision")
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", type=int, default=1)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--dtype", choices=DTYPES)
    p.add_argument("--quantization")
    p.add_argument("--distributed-executor-backend", choices=EXECUTORS)
    return p


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--version"]:
        print(VERSION, flush=True)
        return
    if args[:1] != ["serve"]:
        print(f"vllm stand-in: only `serve` and `--version` are known, got {args[:1]}", file=sys.stderr)
        sys.exit(2)
    parsed, extra = parser().parse_known_args(args[1:])
    mode = os.environ.get("VLLM_STANDIN_MODE", "ok")
    names = parsed.served_model_name or [parsed.model]
    print(f"vllm stand-in serve argv: {args}", flush=True)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], stdin=subprocess.DEVNULL)
    record = {"argv": args, "parsed": vars(parsed), "extra": extra, "pid": os.getpid(), "worker_pid": worker.pid}
    if path := os.environ.get("VLLM_STANDIN_RECORD"):
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
    if mode == "exit1":
        print("ValueError: stand-in refuses to load the model (mode exit1)", flush=True)
        worker.kill()
        sys.exit(1)
    if mode == "wrong_name":
        names = ["some-other-model"]
    script = Script(ttft_s=0.02, itl_s=0.005, llama=False, never_healthy=mode == "never_healthy")
    StandinServer(names, script, host=parsed.host, port=parsed.port).serve_forever()


if __name__ == "__main__":
    main()
