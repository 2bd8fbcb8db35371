"""Test support shipped with servepack (never used by the product): the one fake OpenAI/llama-server.

`ScriptedServer` serves in a thread for tests; `python -m servepack.testing.fake_server` is the same server as
a process, which also answers llama-server's command line (`--version`, `--host`, `--port`), so tests and
benchmarks can launch it through the engine seam as if it were llama-server.

Modules:

- `fake_rpc_server`: A stand-in for llama.cpp's rpc-server, for tests only: it takes rpc-server's command line,
  announces an RPC protocol version the way rpc-server does, and accepts (and closes) TCP connections on its port
  until stopped.
- `fake_server`: The one fake OpenAI/llama-server for tests and benchmarks (never the product).
- `processes`: Processes for tests and benchmarks: the fake server in a process of its own, and a CPU hog that is
  not ours.
- `surface_server`: A scripted llama-server whose speed follows a known response surface of its llama.cpp flags
  (tests, benchmarks).
- `vllm_standin`: A stand-in `vllm` executable for tests (never the product): vLLM cannot be installed where
  servepack is tested.
"""

from servepack.testing.fake_server import Reply, Script, ScriptedServer, sse_chunks

__all__ = ["Reply", "Script", "ScriptedServer", "sse_chunks"]
