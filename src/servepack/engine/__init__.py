"""Engines: the seam every serving engine implements (`base`, `catalog`), and llama.cpp, attach and vLLM behind it.

Modules:

- `attach`: The attach engine: a server someone else already runs.
- `base`: The engine seam: what every serving engine gives a run, whatever launches it.
- `build`: `servepack engine build`: configure and build a pack's llama.cpp targets from a source tree, pinned or
  marked.
- `buildjobs`: How many compile jobs an engine build may run at once, and running a build step with progress on
  stderr.
- `buildrecord`: The record `servepack engine build` writes beside the binaries it made (`servepack-build.json`),
  and reading it.
- `catalog`: The one table of engines: a pack's `engine.name` picks the implementation here.
- `environ`: The environment of every process servepack starts to serve or measure, built from an allow-list.
- `llamacpp`: The llama.cpp engine: a local llama-server, located, launched, probed and torn down; with a
  [topology], the head of an RPC split, launched after the workers it starts itself and after every worker answered.
- `locate`: Find the engine binaries and record what they are: path, sha256, `--version`, pin match.
- `prometheus`: The one reader of a server's Prometheus text (`/metrics`): its samples, by series, summed over
  label sets.
- `rest`: Each engine's answer to "is the server at rest?" (`engine.base.RestCheck`), from the server's own
  counters.
- `rpc`: llama.cpp RPC: `servepack worker` (an rpc-server in the foreground that serves its own fingerprint) and the
  head's side of a topology (reachability, worker identity, the same RPC protocol, liveness during the run).
- `server`: Launch llama-server from a preset, wait for health, and always tear it down.
- `serverlog`: What a starting server's log says before it answers /health: where it listens, and a fatal error.
- `vllm`: The vLLM engine: `vllm serve MODEL` on this host, gated on /health and /v1/models, torn down as a whole
  tree.
"""
