"""Test support shipped with servepack (never used by the product): the one fake OpenAI/llama-server.

`ScriptedServer` serves in a thread for tests; `python -m servepack.testing.fake_server` is the same server as
a process, which also answers llama-server's command line (`--version`, `--host`, `--port`), so tests and
benchmarks can launch it through the engine seam as if it were llama-server.
"""

from servepack.testing.fake_server import Reply, Script, ScriptedServer, sse_chunks

__all__ = ["Reply", "Script", "ScriptedServer", "sse_chunks"]
