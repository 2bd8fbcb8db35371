"""Server benchmarks: exact-token fresh prompts, streamed client timings paired with the server's own.

`run_bench(base_url, model, settings, results, server=..., sampler=...)` is the entry point; it writes
`requests.jsonl` (one RequestSample per request, as measured) and `server_bench.json` (BenchSummary).

Modules:

- `capacity`: The pure part of `servepack capacity`: SLOs, per-point statistics, the search, the knee, what limits.
- `carryover`: The server settings that keep state from one request to the next, named for a sweep (pure).
- `client`: Streaming HTTP client: timestamps every SSE line as it arrives; parsing waits until the stream ends.
- `config`: What one bench run measures: marks, lengths, samples, concurrency, and how it talks to the server.
- `limit`: What limited a capacity point, named from the figures measured during it (pure).
- `liveness`: Is the server alive and working: the one check behind every stream's stall bound (bench cells and
  capacity points), and after a stall the waits until it answers again and is at rest.
- `llama_bench`: llama-bench alongside the server: run it with the preset's flags, parse `-o json`, pair the shapes.
- `load`: Load shapes on one endpoint: closed-loop streams, open-loop arrivals, agent-shaped multi-turn sessions.
- `load_settings`: What a load point is asked and what it gives back: its settings (`LoadSettings`: shape, sizes,
  bounds, client workers), one line of its requests.jsonl (`LoadSample`: a bench `RequestSample` plus where in the
  load it was sent) and the point as run (`PointRun`: its samples, wall time, arrival rates, observer cost and
  energy).
- `load_shapes`: The sending half of a load point, on one event loop: one endpoint's prompt pool and the request
  bodies built before the point's clock, and the one way a shape's coroutine sends a request
  (`LoadSender.send_one`).
- `load_timing`: A load point's send timing, pure: the rate its arrivals achieved (`achieved_rate`), its launch lag
  figures and whether they say the client limited it (`launch_lag`, against the bound `client_lag_bound` chooses).
- `load_workers`: A client worker process of a point spread over `--client-workers`: its job (`WorkerJob`: its
  streams or arrivals, their prompts and bodies, built in the parent), its main (`worker_main`: run its share, send
  back what it sent, or the error), its share of the point (`_Worker._work`: every worker starts on one wall-clock
  instant and stops early on "stop" from the parent or the parent gone), and how the parent reads a worker's pipe
  and exit (`receive`, `how_ended`).
- `observer`: What servepack observes beside the load: its own cost, and what the machine did during each point.
- `order`: Points that do not depend on the order they were measured in: each starts from a server at rest, and the
  sweep measures again its first point and its knee to check that what it found holds.
- `prompts`: Prompts sized to exact server token counts: a unique nonce first, then distinct corpus text.
- `roofline`: Decode roofline: weight bytes read per generated token against memory bandwidth.
- `runner`: run_bench: prompts → cells of streamed requests → requests.jsonl as measured → server_bench.json.
- `shapes/`: The load shapes (closed, open, agent) and their one table, `SHAPES`: `--shape`, the settings, the
  runner of points, the sweep and the exports ask a shape, never compare its name; adding a shape is one module
  and one table line.
- `sample`: One measured request: parse its SSE events, check freshness and length, derive the glossary metrics.
- `server_metrics`: llama-server's Prometheus /metrics: parse, diff counters over a cell, watch requests_deferred.
- `stats`: Order statistics, a seeded bootstrap confidence interval of the median, and the sequential stopping rule.
- `summary`: server_bench.json: per-cell statistics, freshness, failures, roofline, llama-bench ratio, memory.
- `sweep`: run_capacity: the sweep to the knee on one endpoint, writing every point as it ends.
- `sweep_points`: one sweep while it runs (`Sweep`): the search, the saturation probe and the repeats, each point
  from a server at rest, judged and written as it ends.
- `wire`: The HTTP/1.1 client every load request goes out on (bench cells and capacity points alike): keep-alive
  connections on a free list, the response parsed in the protocol.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servepack.bench.config import BenchSettings
    from servepack.bench.runner import run_bench
    from servepack.bench.sample import RequestSample
    from servepack.bench.stats import Stat
    from servepack.bench.summary import BenchSummary, Cell, Fact

__all__ = ["BenchSettings", "BenchSummary", "Cell", "Fact", "RequestSample", "Stat", "run_bench"]

# Imported when first used (PEP 562): a module that needs one part of `bench` (a sample's label, a statistic) does
# not pay for the runner, its HTTP client and the load generator.
_HOME = {"BenchSettings": "config", "run_bench": "runner", "RequestSample": "sample", "Stat": "stats",
         "BenchSummary": "summary", "Cell": "summary", "Fact": "summary"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'servepack.bench' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"servepack.bench.{_HOME[name]}"), name)
    globals()[name] = value
    return value
