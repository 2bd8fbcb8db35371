"""Capacity that does not depend on the order it measured in, against the fake server scripted so that served
requests slow later ones (a host prompt cache every finished request fills) and so that nothing carries over."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servepack.bench.capacity import parse_slo
from servepack.bench.load import LoadSettings
from servepack.bench.sweep import run_capacity
from servepack.cli.main import cli
from servepack.engine.attach import attach
from servepack.pipeline.capacity import order_refusal, result_lines
from servepack.store import ResultsDir
from servepack.testing import Script, ScriptedServer


def _settings(**kw: Any) -> LoadSettings:
    base: dict[str, Any] = {"prompt_tokens": 30, "gen_tokens": 6, "max_requests": 12, "duration_s": 20.0,
                            "timeout_s": 10.0}
    return LoadSettings(**{**base, **kw})


# 4 slots; 50 ms to the first token, 20 ms a token after: 4 streams meet a 200 ms TTFT p90, 8 queue behind them.
def _script(**kw: Any) -> Script:
    return Script(**{"queue": True, "slots": 4, "ttft_s": 0.05, "itl_s": 0.02, **kw})


def test_served_requests_slowing_later_ones_make_the_sweep_order_dependent(tmp_path: Path) -> None:
    # Each served request adds 10 ms to every later prefill: the first point (1 stream, 12 requests) measured
    # first sees 50-160 ms, measured again after 48 requests 530-640 ms. The knee is not claimed; the lines say how
    # much the repeat moved and name what carried over.
    results = ResultsDir(tmp_path / "r")
    with ScriptedServer(_script(carry_s_per_served=0.01)) as srv:
        r = run_capacity(attach(srv.base_url, "m"), _settings(), [parse_slo("ttft_p90=2s")], results, max_level=8,
                         server_argv=["llama-server", "-m", "x.gguf", "-np", "4"])
    assert r.status == "complete"
    repeats = [p for p in r.points if p.repeat_of is not None]
    assert repeats and repeats[0].repeat_of == 0 and repeats[0].level == r.points[0].level
    ind = r.independence
    assert ind.order_dependent is True, ind
    assert r.knee.level is None and "order-dependent" in r.knee.reason and not r.claim_grade
    first = ind.repeats[0]
    move = next(m for m in first.moves if m.figure == "ttft_p90=2s")
    assert move.beyond_noise and move.first is not None and move.again is not None and move.again > 2 * move.first
    assert ind.likely_carried is not None and ind.likely_carried.startswith("likely cache-ram 8192")
    lines = "\n".join(result_lines(r))
    assert "capacity order: ORDER-DEPENDENT" in lines and "BEYOND NOISE" in lines
    assert "state kept across requests: cache-ram 8192 (default)" in lines
    refusal = order_refusal(r, launched=True)
    assert refusal is not None and "--fresh-server-per-point" in refusal
    saved = json.loads(results.file("capacity.json").read_text())
    assert saved["independence"]["order_dependent"] is True and saved["knee"]["level"] is None
    assert {c["name"] for c in saved["carry_over"]} >= {"cache-ram", "cache-idle-slots", "kv-unified"}
    # every point started from a server at rest, read from its /slots and /metrics
    assert all(p["rest"]["at_rest"] is True and p["rest"]["source"] == "/slots + /metrics" for p in saved["points"])


def test_a_server_that_keeps_nothing_gets_no_false_alarm(tmp_path: Path) -> None:
    with ScriptedServer(_script()) as srv:
        r = run_capacity(attach(srv.base_url, "m"), _settings(), [parse_slo("ttft_p90=120ms")], None, max_level=8)
    ind = r.independence
    assert ind.order_dependent is False, ind
    assert r.knee.level == 4, r.knee.reason  # 5 streams queue a request behind the 4 slots
    roles = [x.role for x in ind.repeats]
    assert roles == ["first point", "knee"] and all(not x.moved for x in ind.repeats)
    assert order_refusal(r, launched=True) is None
    # the repeats check the answer; they are never part of it
    assert [p.level for p in r.points if p.repeat_of is not None] == [1, 4]
    assert r.best_level == 4 and "capacity order: independent" in "\n".join(result_lines(r))


def test_a_point_starts_only_once_the_slots_are_idle_and_the_wait_is_recorded(tmp_path: Path) -> None:
    # Each slot stays processing 1.5 s after its reply (as a server still writing its cache): the next point waits.
    with ScriptedServer(_script(linger_s=1.5)) as srv:
        r = run_capacity(attach(srv.base_url, "m"), _settings(max_requests=4), [parse_slo("ttft_p90=2s")], None,
                         max_level=2, repeat_check=False, knee_probe=False)
    rests = [p.rest for p in r.points]
    assert all(x is not None and x.at_rest for x in rests)
    assert rests[0] is not None and rests[0].waited_s < 1.0  # a server nobody used yet is at rest at once
    assert all(x is not None and x.waited_s >= 1.0 for x in rests[1:]), rests
    assert r.independence.order_dependent is None and "turned off" in r.independence.reason
    with ScriptedServer(_script()) as srv:  # the wrong answer: no linger, no wait
        quick = run_capacity(attach(srv.base_url, "m"), _settings(max_requests=4), [parse_slo("ttft_p90=2s")],
                             None, max_level=2, repeat_check=False, knee_probe=False)
    assert all(p.rest is not None and p.rest.waited_s < 1.0 for p in quick.points), [p.rest for p in quick.points]


def test_a_fresh_server_per_point_removes_what_carried_over(tmp_path: Path) -> None:
    # The fake's "fresh server": what the carry grew on is cleared, as a restarted llama-server starts empty.
    script = _script(carry_s_per_served=0.004)
    restarts: list[int] = []
    with ScriptedServer(script) as srv:
        endpoint = attach(srv.base_url, "m")

        def restart() -> float:
            script.served.clear()
            restarts.append(1)
            return 0.01

        endpoint.restart = restart
        told: list[str] = []
        r = run_capacity(endpoint, _settings(), [parse_slo("ttft_p90=120ms")], None, max_level=8,
                         fresh_server=True, on_restart=lambda e: told.append(e.base_url))
    assert len(restarts) == len(r.points) - 1 == len(told)  # every point but the first, told each time
    assert r.fresh_server and r.independence.order_dependent is False, r.independence
    assert r.points[0].rest is not None and r.points[0].rest.fresh_server_s is None
    assert all(p.rest is not None and p.rest.fresh_server_s == 0.01 for p in r.points[1:])
    assert r.knee.level == 4


def test_fresh_server_needs_a_server_servepack_can_restart() -> None:
    from servepack.errors import UsageError

    with ScriptedServer(_script()) as srv, pytest.raises(UsageError, match="--fresh-server-per-point"):
        run_capacity(attach(srv.base_url, "m"), _settings(), [parse_slo("ttft_p90=2s")], None, max_level=2,
                     fresh_server=True)


def test_cli_refuses_fresh_server_with_base_url_and_ends_an_order_dependent_sweep_with_the_fix(
        tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["capacity", "--base-url", "http://127.0.0.1:9", "--model", "m", "--slo",
                                   "ttft_p90=2s", "--fresh-server-per-point"])
    assert res.exit_code == 2 and "drop the flag with --base-url" in res.output
    with ScriptedServer(_script(carry_s_per_served=0.01)) as srv:
        res = CliRunner().invoke(cli, ["capacity", "--base-url", srv.base_url, "--model", "m", "--slo",
                                       "ttft_p90=2s", "--max-concurrency", "8", "--requests", "12",
                                       "--prompt-tokens", "30", "--gen-tokens", "6", "--out", str(tmp_path / "c")])
    assert res.exit_code == 1, res.output
    last = res.output.strip().splitlines()[-1]
    assert "order-dependent sweep, no knee claimed" in last and "restart the server between points" in last
    assert (tmp_path / "c" / "capacity.json").is_file()
