"""llama-server's Prometheus /metrics: parse, diff counters over a cell, watch requests_deferred."""

from __future__ import annotations

import httpx

from servepack.engine.prometheus import by_series

DEFERRED = "llamacpp:requests_deferred"
PROCESSING = "llamacpp:requests_processing"
# Series (the name and its labels as written) → value, comments and lines that are no sample skipped: the one
# Prometheus reader's (engine.prometheus), under the name the bench calls it by.
parse_prometheus = by_series


def diff_counters(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Change of every `_total` counter present in both snapshots."""
    return {k: after[k] - before[k] for k in after if k.endswith("_total") and k in before}


def fetch(client: httpx.Client, base_url: str) -> dict[str, float] | None:
    """A /metrics snapshot, or None when the server does not expose it (no --metrics, not llama-server)."""
    try:
        r = client.get(f"{base_url}/metrics", timeout=5.0)
    except httpx.HTTPError:
        return None
    if r.status_code != 200 or "text/plain" not in r.headers.get("content-type", "text/plain"):
        return None
    parsed = parse_prometheus(r.text)
    return parsed or None
