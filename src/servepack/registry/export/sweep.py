"""A run's speed sweep: one row per bench cell (also `servepack capacity`'s rows) and the speed-sweep record."""

from __future__ import annotations

from typing import Any

from servepack.bench.summary import Cell
from servepack.packs.schema import Pack
from servepack.records.claims import RunView, is_noise_floor
from servepack.registry.export.fields import engine_version, fact, zulu
from servepack.registry.format.check import (
    REGISTRY_SCHEMA_VERSION,
)


def figure_count(cell: Cell) -> int | None:
    """How many samples stand behind the cell's figures: its clean ones, or (none clean) its ok ones."""
    return (cell.n_clean or cell.n_ok) or None


def _r2(v: float | None) -> float | None:
    """Registry figures carry two decimals; the exact medians stay in server_bench.json."""
    return None if v is None else round(v, 2)


def sweep_row(cell: Cell, gpu_gb: float | None, noise_floor: bool) -> dict[str, Any]:
    """One speed-sweep row of a bench cell (also used by `servepack capacity` for its sweep points)."""
    per_stream = cell.decode_tok_s_client.median
    decode = per_stream if cell.concurrency == 1 else cell.decode_tok_s_aggregate.median
    status = "failed" if cell.n_ok == 0 else "observed" if cell.n_fresh == cell.n else "observed-not-all-fresh"
    return {"concurrency": cell.concurrency, "context_tokens": cell.context_tokens, "output_tokens": cell.gen_tokens,
            "prefill_tok_s": _r2(cell.prompt_per_ttft_tok_s_client.median), "decode_tok_s": _r2(decode),
            "decode_tok_s_per_stream": _r2(per_stream), "ttft_ms_p50": _r2(cell.ttft_ms.median),
            "peak_vram_gb": _r2(gpu_gb), "samples": figure_count(cell), "status": status,
            "prefill_tok_s_server": _r2(cell.prompt_eval_tok_s_server.median),
            "decode_tok_s_server": _r2(cell.decode_tok_s_server.median), "noise_floor": noise_floor}


def sweep_record(view: RunView, pack: Pack, sid: str, rid: str, prov: dict[str, Any], src: dict[str, Any]
                 ) -> dict[str, Any]:
    """The run's speed-sweep record `sid` of recipe `rid`: a row per measured cell, its metrics and provenance."""
    bench, r = view.bench, view.receipt
    assert bench is not None and r.engine is not None
    mem = view.memory_summary()
    gpu_gb = mem.gpu_peak_used_bytes / 1e9 if mem and mem.gpu_peak_used_bytes else None
    cells = sorted(bench.cells, key=lambda c: (c.concurrency, c.context_tokens))
    rows = [sweep_row(c, gpu_gb, is_noise_floor(c, pack.claims)) for c in cells]
    dec = [x["decode_tok_s"] for x in rows if x["decode_tok_s"] is not None]
    pre = [x["prefill_tok_s"] for x in rows if x["prefill_tok_s"] is not None]
    eight = [x for x in rows if x["concurrency"] == 1 and 7168 <= x["context_tokens"] <= 9216]
    spec = (r.preset.flags.get("spec-type") if r.preset else None)
    return {
        "schema_version": REGISTRY_SCHEMA_VERSION, "id": sid, "recipe_id": rid, "measured_at": zulu(bench.ended_at),
        "accepted_at": None,
        "source": {"kind": "servepack", "url": src["url"], "paths": [view.bench_file, bench.requests_file]},
        "metrics": {
            "inference_engine_version": engine_version(r.engine.version_text),
            "concurrency": max(x["concurrency"] for x in rows),
            "decode_mode": f"speculative:{spec}" if spec else "standard", "point_count": len(rows),
            "max_prompt_tokens": max(x["context_tokens"] for x in rows),
            "peak_generation_tps": max(dec) if dec else None, "peak_prompt_tps": max(pre) if pre else None,
            "peak_memory_bytes": str(mem.peak_server_rss_bytes) if mem and mem.peak_server_rss_bytes else None,
            "decode8k_tps": eight[-1]["decode_tok_s"] if eight else None,
            "decode8k_context_tokens": eight[-1]["context_tokens"] if eight else None,
            "latest_point_at": zulu(bench.ended_at),
        },
        "provenance": prov,
        "facts": {"metrics.peak_memory_bytes": fact("known", prov, note="peak llama-server RSS (process tree)")
                  if mem and mem.peak_server_rss_bytes else fact("unavailable", prov, "no-memory-sampler")},
        "rows": rows,
    }
