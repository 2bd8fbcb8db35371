"""Each engine's answer to "is the server at rest?" (`engine.base.RestCheck`), from the server's own counters.

- llama-server: `/slots` (every slot's `is_processing`; on by default, `--no-slots` turns it off) and, when served
  (`--metrics`), `/metrics` `llamacpp:requests_processing` + `llamacpp:requests_deferred`. At rest: no slot
  processing and nothing processing or deferred. Neither readable: unknown, with the reason.
- vLLM: `/metrics` `vllm:num_requests_running` + `vllm:num_requests_waiting` (summed over its label sets).
- an attached server: whichever of the two answers (llama-server's first), else unknown.
"""

from __future__ import annotations

from typing import Any

import httpx

from servepack.engine.base import Rest, rest_unknown
from servepack.engine.prometheus import summed

TIMEOUT_S = 5.0


def _get(base_url: str, path: str) -> httpx.Response | None:
    try:
        r = httpx.get(f"{base_url}{path}", timeout=TIMEOUT_S)
    except httpx.HTTPError:
        return None
    return r if r.status_code == 200 else None


class LlamaServerRest:
    """llama-server at rest: `/slots` all idle and `/metrics` (when served) nothing processing or deferred."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    def slots(self) -> tuple[int, int] | None:
        """(busy, total) from /slots, or None when it is not served."""
        r = _get(self.base_url, "/slots")
        if r is None:
            return None
        try:
            body: Any = r.json()
        except ValueError:
            return None
        if not isinstance(body, list) or not all(isinstance(s, dict) for s in body):
            return None
        return sum(1 for s in body if s.get("is_processing")), len(body)

    def queue(self) -> int | None:
        """Requests processing + deferred from /metrics, or None when it is not served."""
        r = _get(self.base_url, "/metrics")
        if r is None:
            return None
        m = summed(r.text)
        if "llamacpp:requests_processing" not in m:
            return None
        return int(m["llamacpp:requests_processing"] + m.get("llamacpp:requests_deferred", 0.0))

    def rest(self) -> Rest:
        slots, queue = self.slots(), self.queue()
        if slots is None and queue is None:
            return rest_unknown("llama-server serves neither /slots (--no-slots?) nor /metrics (--metrics)")
        sources = [name for name, got in (("/slots", slots), ("/metrics", queue)) if got is not None]
        busy, total = slots if slots is not None else (None, None)
        at_rest = (busy in (None, 0)) and (queue in (None, 0))
        bits = []
        if slots is not None:
            bits.append(f"{busy} of {total} slots processing")
        if queue is not None:
            bits.append(f"{queue} requests processing or deferred")
        return Rest(at_rest=at_rest, source=" + ".join(sources), reason="; ".join(bits), in_flight=queue,
                    busy_slots=busy, slots=total)


class VllmRest:
    """vLLM at rest: `/metrics` shows no request running or waiting."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    def rest(self) -> Rest:
        r = _get(self.base_url, "/metrics")
        m = summed(r.text) if r is not None else {}
        if "vllm:num_requests_running" not in m:
            return rest_unknown("no vLLM /metrics (vllm:num_requests_running) answered")
        running = int(m["vllm:num_requests_running"])
        waiting = int(m.get("vllm:num_requests_waiting", 0.0))
        return Rest(at_rest=running == 0 and waiting == 0, source="/metrics", in_flight=running + waiting,
                    reason=f"{running} requests running, {waiting} waiting")


class AttachedRest:
    """A server servepack did not start: llama-server's check where it answers, else vLLM's, else unknown."""

    def __init__(self, base_url: str) -> None:
        self.checks = (LlamaServerRest(base_url), VllmRest(base_url))

    def rest(self) -> Rest:
        for check in self.checks:
            got = check.rest()
            if got.at_rest is not None:
                return got
        return rest_unknown("the attached server answers neither llama-server's /slots or /metrics nor vLLM's "
                            "/metrics")
