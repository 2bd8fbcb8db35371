"""The `servepack` command line: click commands that parse, call one function and render (`render`).

Modules:

- `_options`: Options shared by several commands: those that resolve a model (run, bench, smoke, serve), the server
  and model to launch instead of the pins (bench, capacity, tune), the registry's --db, the results directory's
  --out.
- `bench`: `servepack bench` (launch or attach) and `servepack llama-bench`.
- `capacity`: `servepack capacity`: how much load the server serves within its SLOs, and where the knee is.
- `main`: The `servepack` command: a click group that gathers `COMMANDS` from every module of this package.
- `packs`: `servepack packs`, `servepack pack show ID`, `servepack pack validate FILE`.
- `pull`: `servepack pull`, `servepack engine build|show` and `servepack twin`: get the pinned bytes, or say why
  not.
- `records`: `servepack verify`, `registry export|check|show`, `servepack compare` (import|list|choose:
  registry_db.py).
- `registry_db`: `servepack registry import|list|choose`: the local registry database (servepack.registry).
- `render`: Shared output helpers: progress and tables on stderr, results on stdout; the one way text reaches the
  terminal.
- `report`: `servepack report DIR… [--out FILE.html]`: the evidence as one self-contained page.
- `reproduce`: `servepack reproduce RECORD [PACK]`: does a registry record's number hold on this machine?
- `run`: `servepack run`: the main job — with no PACK, the embedded default.
- `serve`: `servepack serve` (foreground server) and `servepack doctor`.
- `smoke`: `servepack smoke [PACK] --suite NAME` (run suites) and `servepack smoke score` (judge a recorded
  message).
- `tune`: `servepack tune`: find the best llama-server flags for a pack on this machine, under guards.
- `worker`: `servepack worker`: an llama.cpp rpc-server in the foreground, for the head of an RPC split.
"""
