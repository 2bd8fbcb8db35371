"""A capacity point's streams are cut by the same stall check as a bench cell's (bench/liveness.py): a server that
stops before its first token is found at the floor by the server check, not waited on to the per-request timeout;
a server that is working on a long first token is left to it."""

from __future__ import annotations

import time
from typing import Any

import httpx

from servepack.bench.load import LoadRunner, LoadSettings
from servepack.bench.prompts import ServerTokenizer
from servepack.engine.attach import attach
from servepack.testing import Script, ScriptedServer

FLOOR_S, TIMEOUT_S = 1.0, 10.0


def _point(script: Script, **kw: Any) -> list[Any]:
    settings = LoadSettings(**{"prompt_tokens": 30, "gen_tokens": 8, "max_requests": 2, "duration_s": 20.0,
                               "timeout_s": TIMEOUT_S, "stall_floor_s": FLOOR_S, **kw})
    with ScriptedServer(script) as srv, httpx.Client(timeout=10.0) as sync:
        runner = LoadRunner(attach(srv.base_url, "m"), settings, ServerTokenizer(sync, srv.base_url, "chat"),
                            llama=True)
        return runner.run_point(0, 1).samples


def test_a_stop_before_the_first_token_is_cut_at_the_floor_by_the_server_check() -> None:
    t0 = time.monotonic()
    # (a point sends on into the stop, replacing nothing: only its first request is looked at)
    first, _ = _point(Script(ttft_s=0.03, itl_s=0.02, freeze=(1, 0, 4.0)))
    assert time.monotonic() - t0 < TIMEOUT_S
    assert first.stalled and not first.ok and first.stall_bound_s == FLOOR_S
    # Wrong answer: no server check, so only the per-request timeout cut it ("no complete response within ...")
    assert "(bound 1.0 s = floor 1 s, no earlier first event in the point; server check: /health unanswered " \
           "within 0.5 s" in (first.failure or "")
    assert first.e2e_ms is not None and first.e2e_ms < (FLOOR_S * 1.5 + 0.8) * 1000


def test_a_long_first_token_from_a_working_server_is_not_a_stall() -> None:
    (only,) = _point(Script(ttft_s=2.5, itl_s=0.01), max_requests=1)
    assert only.ok and not only.stalled and only.ttft_ms is not None and only.ttft_ms >= 2400
