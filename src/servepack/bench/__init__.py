"""Server benchmarks: exact-token fresh prompts, streamed client timings paired with the server's own.

`run_bench(base_url, model, settings, results, server=..., sampler=...)` is the entry point; it writes
`requests.jsonl` (one RequestSample per request, as measured) and `server_bench.json` (BenchSummary).
"""

from servepack.bench.config import BenchSettings
from servepack.bench.runner import run_bench
from servepack.bench.sample import RequestSample
from servepack.bench.stats import Stat
from servepack.bench.summary import BenchSummary, Cell, Fact

__all__ = ["BenchSettings", "BenchSummary", "Cell", "Fact", "RequestSample", "Stat", "run_bench"]
