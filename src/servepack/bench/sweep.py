"""run_capacity: the sweep to the knee on one endpoint, writing every point as it ends.

Each point's requests go to `capacity_requests.jsonl` and its judged statistics to `capacity_points.jsonl` the
moment it ends, so Ctrl-C, a dead server or a tripped guard keeps every finished point (and the interrupted one's
requests); `capacity.json` is written at the end, `status: partial` with the reason when the sweep stopped early.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

import httpx
from pydantic import Field

from servepack.bench import sweep_points
from servepack.bench.capacity import (
    Knee,
    PointStats,
    Saturation,
    Search,
    Slo,
    classify_limit,
    find_knee,
    find_saturation,
    level_unit,
)
from servepack.bench.carryover import CarrySetting, carry_over, carry_sentence, likely_carried
from servepack.bench.limit import Limit
from servepack.bench.load import LoadRunner, LoadSettings, client_lag_bound
from servepack.bench.observer import ObserverCost, PointWatch
from servepack.bench.order import (
    REST_TIMEOUT_S,
    Independence,
    Repeat,
    judge,
)
from servepack.bench.prompts import EstimateTokenizer, ServerTokenizer, Tokenizer
from servepack.bench.roofline import WeightBytes
from servepack.bench.runner import probe_server
from servepack.bench.shapes import shape_for
from servepack.bench.sweep_points import PointEnergy, Sweep, curve
from servepack.engine.base import Endpoint
from servepack.errors import UsageError
from servepack.host.energy import EnergyMeter
from servepack.host.memory import MemorySampler
from servepack.store import ResultsDir, rfc3339, utc_now
from servepack.strict import Strict

CAPACITY_SCHEMA: Final = "servepack.capacity/v2"
RESULT_NAME = "capacity.json"
REQUESTS_NAME = "capacity_requests.jsonl"
POINTS_NAME = "capacity_points.jsonl"

class CapacityResult(Strict):
    """capacity.json: the sweep, the highest level meeting every SLO, its goodput, the knee and the limit.

    v2 (from v1): the knee is the largest load meeting every SLO with a client that kept up (v1's knee, where
    throughput goes flat, is `saturation`); the limit names one of accelerator compute, memory bandwidth, server
    host thread, host CPU, client, SLO (or none) with its figures, and every point carries its own."""

    schema_version: Literal["servepack.capacity/v2"] = CAPACITY_SCHEMA
    status: Literal["complete", "partial"]
    stopped_reason: str | None = None
    started_at: str
    ended_at: str
    wall_s: float
    base_url: str
    model: str
    settings: LoadSettings
    slos: list[Slo]
    level_unit: str = Field(description="streams, requests/s or sessions")
    max_level: float
    slots: int | None = Field(description="the server's parallel slots (/props total_slots, else the preset)")
    slots_source: str | None = None
    points: list[PointStats] = Field(description="in the order measured")
    client_lag_bound_ms: float = Field(10.0, description="a point whose launch lag p99 is above this is "
                                       "client-limited (never the best level, the knee or a headline)")
    client_lag_bound_source: str = ""
    client_limited_levels: list[float] = Field(default_factory=list, description="points the client could not "
                                               "hold (launch lag over the bound, or arrivals dropped)")
    best_level: float | None = Field(description="the highest level measured that met every SLO with a client that "
                                                 "kept up")
    first_fail_level: float | None
    goodput_rps: float | None = Field(description="requests/s meeting every SLO at best_level")
    knee: Knee = Field(description="the largest load meeting every SLO with a client that kept up")
    saturation: Saturation = Field(description="where throughput stops growing while latency climbs")
    limit: Limit = Field(description="what limits capacity: the lowest failing point's verdict")
    observer: ObserverCost = Field(description="CPU-seconds of servepack and of the server over every point")
    figures: str = Field(description="which figures are fresh and which warm")
    claim_grade: bool = Field(description="every request fresh (single-shot shapes); agent figures never are")
    requests_file: str = REQUESTS_NAME
    points_file: str = POINTS_NAME
    energy: list[PointEnergy] = Field(default_factory=list, description="per point: joules over its measured window "
                                      "and per output token, by meter; absent or unreadable meters say why")
    fresh_server: bool = Field(False, description="every point after the first on a fresh server")
    carry_over: list[CarrySetting] = Field(default_factory=list, description="the server's settings that keep "
                                           "state across requests, with what they do to a sweep")
    independence: Independence = Field(Independence(order_dependent=None, reason="not checked"),
                                       description="the first point and the knee measured again after the search")

def run_capacity(
    endpoint: Endpoint, settings: LoadSettings, slos: Sequence[Slo], results: ResultsDir | None, *,
    max_level: float, start_level: float | None = None, rel_step: float = 0.1, slots: int | None = None,
    slots_source: str | None = None, server_pids: Sequence[int] = (), sampler: MemorySampler | None = None,
    progress: Callable[[str], None] | None = None, knee_probe: bool = True, energy: EnergyMeter | None = None,
    watch: PointWatch | None = None, server_argv: Sequence[str] | None = None, repeat_check: bool = True,
    rest_timeout_s: float = REST_TIMEOUT_S, fresh_server: bool = False,
    on_restart: Callable[[Endpoint], None] | None = None, weight_bytes_per_token: int | None = None,
    peak_gbs: float | None = None, peak_source: str | None = None, weight_bytes: WeightBytes | None = None,
) -> CapacityResult:
    """Search for the highest level meeting every SLO; KeyboardInterrupt and ServerDied are re-raised after
    capacity.json (partial) is written. Each point's joules come from `energy` (by default every meter this host
    has: NVML GPUs, RAPL); `watch` reads the GPU, the server's threads and the host during each point (by default
    one on `server_pids`).

    Every point starts from a server at rest (`bench.order.wait_at_rest`, the wait recorded with the point). After
    the search (`repeat_check`), the first point and the knee are measured again: a move beyond their noise marks
    the sweep order-dependent and no knee is claimed. The server's settings that keep state across requests are
    named from `server_argv` (by default the argv servepack launched) and /props.

    `fresh_server`: every point after the first runs on a fresh server (`Endpoint.restart`, outside the point's
    timing; `on_restart` is told of each, so a memory sampler can follow the new process).

    `weight_bytes_per_token` (the model's weight bytes a decode step reads) and `peak_gbs` (the device's peak
    memory bandwidth) give each point's achieved bandwidth: the only figure that names memory bandwidth the
    limit; `weight_bytes` splits the first for an MoE (a step reads the experts its streams use)."""
    say = progress or (lambda _: None)
    if fresh_server and endpoint.restart is None:
        raise UsageError("--fresh-server-per-point: this server was not started by servepack (or stands on RPC "
                         "workers), so it cannot be started afresh for each point; drop the flag")
    started, t0 = utc_now(), time.monotonic()
    base_url = endpoint.base_url.rstrip("/")
    meter = energy or EnergyMeter()
    with httpx.Client(timeout=30.0) as sync, meter if energy is None else contextlib.nullcontext(meter):
        llama, tokenizer, props = _probe(sync, base_url, settings)
        # The running server's own count wins over what the preset asked for.
        if isinstance(props.get("total_slots"), int) and props["total_slots"] > 0:
            slots, slots_source = int(props["total_slots"]), "/props total_slots"
        carried = carry_over(_server_argv(endpoint, server_argv), props if llama else None)
        runner = LoadRunner(endpoint, settings, tokenizer, llama=llama, server_pids=list(server_pids),
                            progress=say, energy=meter)
        if sampler is not None:
            runner.stop = sampler.stop_reason  # a guard that trips ends the point at once, not at its duration
        bound_ms, bound_source = client_lag_bound(settings.client_lag_bound_ms,
                                                  [x.bound for x in slos if x.metric == "ttft"])
        shape = shape_for(settings.shape)
        search = Search(start=start_level or 1.0, maximum=max_level, integer=shape.counts_streams, rel_step=rel_step)
        sweep = Sweep(endpoint=endpoint, settings=settings, slos=slos, runner=runner, search=search, say=say,
                      unit=shape.unit, counts_streams=shape.counts_streams, slots=slots, slots_source=slots_source,
                      bound_ms=bound_ms, sampler=sampler, fresh_server=fresh_server, on_restart=on_restart,
                      rest_timeout_s=rest_timeout_s, weight_bytes_per_token=weight_bytes_per_token,
                      peak_gbs=peak_gbs, peak_source=peak_source, weight_bytes=weight_bytes,
                      req_writer=results.jsonl(REQUESTS_NAME) if results else None,
                      pt_writer=results.jsonl(POINTS_NAME) if results else None,
                      watcher=watch or PointWatch(server_pids))
        sweep.announce(base_url, max_level, bound_source)
        say(carry_sentence(carried))
        sweep.run(max_level, knee_probe=knee_probe, repeat_check=repeat_check)
        result = _result(settings, slos, sweep.points, search, started, t0, base_url, endpoint.model, max_level,
                         slots, slots_source, sweep.stopped, sampler)
        result.client_lag_bound_ms, result.client_lag_bound_source = bound_ms, bound_source
        result.energy = sweep.energies
        result.carry_over, result.fresh_server = carried, fresh_server
        _independence(result, sweep.repeats, carried, slos, repeat_check)
        if results is not None:
            results.write_json(RESULT_NAME, result)
        if sweep.pending is not None:
            raise sweep.pending
        return result

def _probe(sync: httpx.Client, base_url: str, settings: LoadSettings) -> tuple[bool, Tokenizer, dict[str, Any]]:
    """Whether the server is llama-server, the tokenizer that sizes prompts on it (its own when it counts exactly),
    and its /props."""
    llama, facts, props = probe_server(sync, base_url, settings.endpoint)
    tokenizer: Tokenizer = ServerTokenizer(sync, base_url, settings.endpoint) \
        if facts["prompt.exact_tokens"].state == "known" else EstimateTokenizer()
    return llama, tokenizer, props


def _server_argv(endpoint: Endpoint, given: Sequence[str] | None) -> list[str] | None:
    """The server's argv: as given, else as servepack launched it (None: unknown)."""
    if given is not None:
        return list(given)
    return endpoint.processes[0].argv if endpoint.processes and endpoint.processes[0].argv else None

def _independence(result: CapacityResult, repeats: list[Repeat], carried: Sequence[CarrySetting],
                  slos: Sequence[Slo], checked: bool) -> None:
    """The verdict on the order; an order-dependent sweep claims no knee and is no claim's."""
    if not checked:
        result.independence = Independence(order_dependent=None, reason="the repeat check was turned off")
        return
    if result.status == "partial":
        result.independence = Independence(order_dependent=None, repeats=repeats,
                                           reason=f"the sweep stopped before its repeats: {result.stopped_reason}")
        return
    result.independence = judge(repeats, likely_carried(carried), result.level_unit)
    if result.independence.order_dependent:
        result.knee = Knee(level=None, reason=f"order-dependent sweep: {result.independence.reason}")
        result.claim_grade = False


def _result(settings: LoadSettings, slos: Sequence[Slo], points: list[PointStats], search: Search,
            started: Any, t0: float, base_url: str, model: str, max_level: float, slots: int | None,
            slots_source: str | None, stopped: str | None, sampler: MemorySampler | None) -> CapacityResult:
    primary = [p for p in points if p.repeat_of is None]  # a repeat checks the answer; it is never part of it
    by_level = {p.level: p for p in primary if p.stopped is None}
    best = by_level.get(search.best) if search.best is not None else None
    knee = find_knee(primary, slos)
    if knee.level is not None and search.next_level() is not None:
        # The search had levels left to try (stopped, or out of points): a higher one might have met every SLO too.
        ended = (f"the sweep stopped before its search ended ({stopped})" if stopped else
                 f"the search used the sweep's {sweep_points.MAX_POINTS} points before it ended")
        knee = Knee(level=None, reason=f"{ended}: {knee.level:g} {level_unit(settings.shape)} met every SLO and a "
                                       "higher level was still to be tried; no knee is claimed")
    saturation = find_saturation(curve(list(by_level.values())))
    why = stopped
    if sampler is not None and sampler.tripped is not None:
        why = f"memory {sampler.tripped.stop_reason()}"  # the words the cut point says (free swap is no RAM)
    limit = classify_limit(primary, stopped=why)
    cost = ObserverCost.combine(p.observer for p in points if p.observer is not None)
    agent = shape_for(settings.shape).warm
    fresh_all = bool(points) and all(p.n_fresh == p.n_ok for p in points)
    figures = ("warm: every turn after the first extends an earlier prompt (cache_n recorded per turn), and a "
               "first turn may reuse the template's opening; these figures are never a claim's" if agent else
               "fresh: every single-shot request opens with its own nonce and sends cache_prompt false; "
               + ("all were fresh (cache_n 0)" if fresh_all else "not all were fresh (see fresh_reason)"))
    return CapacityResult(
        status="partial" if stopped else "complete", stopped_reason=stopped, started_at=rfc3339(started),
        ended_at=rfc3339(utc_now()), wall_s=round(time.monotonic() - t0, 3), base_url=base_url, model=model,
        settings=settings, slos=list(slos), level_unit=level_unit(settings.shape), max_level=max_level, slots=slots,
        slots_source=slots_source, points=points, best_level=search.best, first_fail_level=search.fail,
        goodput_rps=best.goodput_rps if best else None, knee=knee, saturation=saturation, limit=limit, observer=cost,
        figures=figures, client_limited_levels=[p.level for p in primary if p.client_limited],
        claim_grade=not agent and fresh_all and not stopped,
    )
