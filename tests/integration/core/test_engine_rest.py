"""The engine seam's "at rest?": llama-server's /slots and /metrics (the fake scripted with slots still processing
after a reply, and with neither endpoint served), vLLM's /metrics, and an attached server asking the same."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from servepack.engine.attach import attach
from servepack.engine.rest import LlamaServerRest, VllmRest
from servepack.testing import Script, ScriptedServer


def _script(**kw: Any) -> Script:
    return Script(**{"queue": True, "slots": 4, "ttft_s": 0.05, "itl_s": 0.02, **kw})


def test_the_engine_seam_answers_at_rest_from_the_servers_own_counters() -> None:
    script = _script(linger_s=30.0)
    with ScriptedServer(script) as srv:
        check = LlamaServerRest(srv.base_url)
        idle = check.rest()
        assert idle.at_rest is True and idle.busy_slots == 0 and idle.slots == 4 and idle.in_flight == 0
        script.lingering = 2  # two slots still processing
        busy = check.rest()
        assert busy.at_rest is False and busy.busy_slots == 2 and "2 of 4 slots processing" in busy.reason
        assert attach(srv.base_url, "m").at_rest().at_rest is False  # attach asks the same counters
        script.slots_endpoint, script.metrics = False, False  # --no-slots, no --metrics: it cannot tell
        unknown = check.rest()
        assert unknown.at_rest is None and "--no-slots" in unknown.reason
        assert attach(srv.base_url, "m").at_rest().at_rest is None


class _VllmMetrics(http.server.BaseHTTPRequestHandler):
    running = 0

    def do_GET(self) -> None:
        body = (f"# HELP vllm:num_requests_running x\nvllm:num_requests_running{{model_name=\"m\"}} "
                f"{self.running}.0\nvllm:num_requests_waiting{{model_name=\"m\"}} 0.0\n").encode()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def vllm_metrics() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _VllmMetrics)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    t.join(5)


def test_vllm_at_rest_from_its_metrics(vllm_metrics: str) -> None:
    assert VllmRest(vllm_metrics).rest().at_rest is True
    _VllmMetrics.running = 3
    try:
        got = VllmRest(vllm_metrics).rest()
        assert got.at_rest is False and got.in_flight == 3 and "3 requests running" in got.reason
    finally:
        _VllmMetrics.running = 0
    assert LlamaServerRest(vllm_metrics).rest().at_rest is None  # not llama-server: it cannot tell
