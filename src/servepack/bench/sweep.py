"""run_capacity: the sweep to the knee on one endpoint, writing every point as it ends.

Each point's requests go to `capacity_requests.jsonl` and its judged statistics to `capacity_points.jsonl` the
moment it ends, so Ctrl-C, a dead server or a tripped guard keeps every finished point (and the interrupted one's
requests); `capacity.json` is written at the end, `status: partial` with the reason when the sweep stopped early.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import httpx
from pydantic import Field

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
    point_limit,
    point_stats,
)
from servepack.bench.carryover import CarrySetting, carry_over, carry_sentence, likely_carried
from servepack.bench.limit import Limit
from servepack.bench.load import LoadRunner, LoadSample, LoadSettings, PointRun, client_lag_bound
from servepack.bench.observer import ObserverCost, PointWatch, local_pids
from servepack.bench.order import (
    REST_TIMEOUT_S,
    Independence,
    PointRest,
    Repeat,
    compare_repeat,
    judge,
    wait_at_rest,
)
from servepack.bench.prompts import EstimateTokenizer, ServerTokenizer, Tokenizer
from servepack.bench.roofline import WeightBytes
from servepack.bench.runner import probe_server
from servepack.bench.shapes import shape_for
from servepack.engine.base import Endpoint
from servepack.errors import EngineError, ServerDied, UsageError
from servepack.host.energy import Energy, EnergyMeter
from servepack.host.memory import MemorySampler
from servepack.store import JsonlWriter, ResultsDir, rfc3339, utc_now
from servepack.strict import Strict

CAPACITY_SCHEMA: Final = "servepack.capacity/v2"
RESULT_NAME = "capacity.json"
REQUESTS_NAME = "capacity_requests.jsonl"
POINTS_NAME = "capacity_points.jsonl"
FRESH_FAILED: Final = "fresh server"  # how a stop before a fresh server served begins
MAX_POINTS = 24  # a sweep never measures more points than this, whatever the range


class PointEnergy(Strict):
    """The joules of one point's measured window, by meter, and per output token."""

    point: int
    level: float
    energy: Energy


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


def _say_point(say: Callable[[str], None], p: PointStats, unit: str) -> None:
    t = p.throughput
    bits = [f"{p.level:g} {unit}: {'PASS' if p.passed else 'fail'}",
            *(f"{k} {('—' if v is None else f'{v:,.1f}')}" for k, v in p.slo_values.items()),
            f"goodput {p.goodput_rps:.2f} req/s",
            f"out {t.output_tok_s_wall or 0:,.1f} tok/s (wall) · decode {t.decode_tok_s_per_stream or 0:,.1f}/stream, "
            f"{t.decode_tok_s_concurrent or 0:,.1f} concurrent",
            f"{p.n_ok}/{p.n} ok"]
    if p.rate_achieved is not None:
        bits.append(f"rate {p.rate_achieved:.2f}/s achieved")
    if p.cache_n_median is not None and shape_for(p.shape).warm:
        bits.append(f"cache_n median {p.cache_n_median:,.0f}")
    if p.launch_lag_p99_ms is not None:
        bits.append(f"launch lag p50 {p.launch_lag_p50_ms or 0:,.1f} / p99 {p.launch_lag_p99_ms:,.1f} ms")
    if p.limit is not None and p.limit.kind != "none":
        bits.append(f"limit: {p.limit.name}")
    say(" · ".join(bits))
    if p.client_limited:
        say(f"  CLIENT-LIMITED at {p.level:g} {unit}: {p.client_limited_reason}; the point is kept and marked, "
            "and is never the best level, the knee or a headline")


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
        sweep = _Sweep(endpoint=endpoint, settings=settings, slos=slos, runner=runner, search=search, say=say,
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


@dataclass
class _Sweep:
    """One sweep while it runs: what each point needs, and what the points left (the points, their joules, the
    repeats, why the sweep stopped and the exception re-raised once capacity.json is written)."""

    endpoint: Endpoint
    settings: LoadSettings
    slos: Sequence[Slo]
    runner: LoadRunner
    search: Search
    say: Callable[[str], None]
    unit: str
    counts_streams: bool  # the level counts streams: compared with the server's slots
    slots: int | None
    slots_source: str | None
    bound_ms: float
    sampler: MemorySampler | None
    fresh_server: bool
    on_restart: Callable[[Endpoint], None] | None
    rest_timeout_s: float
    weight_bytes_per_token: int | None
    peak_gbs: float | None
    peak_source: str | None
    weight_bytes: WeightBytes | None
    req_writer: JsonlWriter | None
    pt_writer: JsonlWriter | None
    watcher: PointWatch
    points: list[PointStats] = field(default_factory=list)
    energies: list[PointEnergy] = field(default_factory=list)
    repeats: list[Repeat] = field(default_factory=list)
    stopped: str | None = None
    pending: BaseException | None = None

    def announce(self, base_url: str, max_level: float, bound_source: str) -> None:
        st, slots = self.settings, self.slots
        self.say(f"capacity {base_url}: {st.shape} load, prompt {st.prompt_tokens} + gen "
                 f"{st.gen_tokens} tokens, ≤ {st.max_requests} requests and ≤ {st.duration_s:g} s a "
                 f"point, up to {max_level:g} {self.unit}; SLOs: {', '.join(s.describe() for s in self.slos)}"
                 + (f"; {slots} slots ({self.slots_source})" if slots else "")
                 + f"; client-limited above a launch lag p99 of {self.bound_ms:g} ms ({bound_source})")

    def run(self, max_level: float, *, knee_probe: bool, repeat_check: bool) -> None:
        """The SLO search, the saturation probe and the repeats, each point written as it ends; Ctrl-C or a point
        that must stop the sweep ends it (`stopped`, `pending`), the writers closed whatever happens."""
        try:
            self.watcher.start()  # in the try: the finally stops and joins its thread, whatever happens from here
            self.search_slos()
            if knee_probe:
                self.probe_saturation(max_level)
            if self.stopped is None and repeat_check:
                self.repeats = _repeat(self.points, self.slos, self.measure, self.say, self.unit)
        except KeyboardInterrupt as exc:
            self.stopped, self.pending = "interrupted (Ctrl-C)", exc
        finally:
            self.watcher.stop()
            for w in (self.req_writer, self.pt_writer):
                if w is not None:
                    w.close()

    def search_slos(self) -> None:
        """Bracket, then bisect, for the highest level meeting every SLO."""
        while (level := self.search.next_level()) is not None and len(self.points) < MAX_POINTS:
            stats = self.measure(level)
            if stats is None:
                break
            # A point the client could not hold measured the client: it is no pass, so the answer (and the
            # headline goodput) is always a level the client held.
            self.search.observe(level, stats.passed and not stats.client_limited)
            _say_point(self.say, stats, self.unit)

    def probe_saturation(self, max_level: float) -> None:
        """The SLO search stops at its bracket; saturation (throughput flat while latency climbs) may lie above it:
        keep doubling past the highest level measured, up to the maximum, until it shows."""
        while self.stopped is None and len(self.points) < MAX_POINTS:
            measured = [p for p in self.points if p.stopped is None]
            if not measured or find_saturation(_curve(measured)).level is not None:
                break
            top = max(p.level for p in measured)
            if any(p.client_limited for p in measured if p.level >= top):
                self.say(f"saturation probe stopped: the client could not hold {top:g} {self.unit}, so a higher "
                         "level would measure the client, not the server")
                break
            level = self.search.round(min(top * 2, max_level))
            if level <= top:
                break
            self.say(f"saturation probe: {level:g} {self.unit} (beyond the SLO search, to find where throughput "
                     "stops growing)")
            stats = self.measure(level)
            if stats is None:
                break
            _say_point(self.say, stats, self.unit)  # not fed to the search: its bracket is the SLO answer

    def measure(self, level: float, repeat_of: int | None = None) -> PointStats | None:
        """One point; None when the sweep must stop (`stopped`, and `pending` to re-raise, are set)."""
        slots = self.slots
        if slots is not None and self.counts_streams and level > slots and repeat_of is None:
            self.say(f"{level:g} {self.unit} is above the server's {slots} slots ({self.slots_source}): the point "
                     f"runs, and {level - slots:g} of them wait in the server's queue")
        fresh_s = self.fresh_start(level)
        if self.pending is not None:  # the fresh server did not start, or Ctrl-C while it started
            return None
        rest = self.at_rest(level, fresh_s)
        self.watcher.tick()  # a reading just before the point, so its window starts close to the point's clock
        try:
            run = self.runner.run_point(len(self.points), level)
        except KeyboardInterrupt as exc:
            self.stopped, self.pending = "interrupted (Ctrl-C)", exc
            if self.runner.last is not None and self.runner.last.samples:
                self.keep(self.runner.last, self.stopped, rest, repeat_of)
            return None
        if run.prompts_built_during:
            self.say(f"  {run.prompts_built_during} prompts were built during the point (more requests than the "
                     "last point's rate foresaw); their wait is in the launch lag")
        stop = self.stop_reason(run)
        stats = self.keep(run, stop, rest, repeat_of)
        if stop is not None:
            self.stopped = stop
            return None
        return stats

    def fresh_start(self, level: float) -> float | None:
        """With `fresh_server`, every point after the first on a fresh server: its start in seconds (None: none,
        or it did not start: then `stopped` and `pending` are set; the points so far stay, capacity.json partial)."""
        if not (self.fresh_server and self.points):
            return None
        assert self.endpoint.restart is not None
        try:
            fresh_s = self.endpoint.restart()
        except EngineError as exc:
            why = str(exc).splitlines()[0].rstrip(":")
            self.stopped = f"{FRESH_FAILED} for {level:g} {self.unit} did not start: {why}"
            self.pending = ServerDied(self.stopped)
            return None
        except KeyboardInterrupt as exc:  # launch() stopped the half-started server
            self.stopped = f"interrupted (Ctrl-C) while the {FRESH_FAILED} for {level:g} {self.unit} started"
            self.pending = exc
            return None
        self.runner.server_pids = local_pids(self.endpoint)
        self.watcher.follow(self.runner.server_pids)
        if self.on_restart is not None:
            self.on_restart(self.endpoint)
        self.say(f"  fresh server for {level:g} {self.unit}: started in {fresh_s:.1f} s (outside the point's timing)")
        return fresh_s

    def at_rest(self, level: float, fresh_s: float | None) -> PointRest:
        """Wait for the server to come to rest before the point, and say what the wait found."""
        rest = wait_at_rest(self.endpoint, timeout_s=self.rest_timeout_s)
        rest.fresh_server_s = None if fresh_s is None else round(fresh_s, 3)
        if rest.at_rest is False:
            self.say(f"  the server was not at rest before {level:g} {self.unit} ({rest.reason}); the point runs and "
                     "records it")
        elif rest.at_rest is None:
            self.say(f"  whether the server was at rest before {level:g} {self.unit} is unknown ({rest.reason})")
        elif rest.waited_s >= 1.0:
            self.say(f"  waited {rest.waited_s:.1f} s for the server to come to rest ({rest.source})")
        return rest

    def stop_reason(self, run: PointRun) -> str | None:
        """Why the sweep stops after this point (a memory guard, a server that stopped answering or died, a
        client worker lost), or None; a server that died is also the exception to re-raise (`pending`)."""
        if self.sampler is not None and (guard := self.sampler.stop_reason()) is not None:
            return guard
        if not any(s.ok for s in run.samples) and any(_transport(s) for s in run.samples):
            try:
                self.endpoint.check_alive()
            except ServerDied as exc:
                self.pending = exc
                return f"server died: {exc}"
            return "server stopped answering: every request of the point failed in transport"
        return run.stopped  # a client worker died or failed: the point is missing its requests

    def keep(self, run: PointRun, stop: str | None, rest: PointRest | None, repeat_of: int | None) -> PointStats:
        """Judge the point, name its limit, and write its requests and statistics."""
        st, slots, points = self.settings, self.slots, self.points
        evidence = self.watcher.window(run.started_unix, run.started_unix + run.wall_s)
        stats = point_stats(len(points), run.level, run.samples, run.wall_s, self.slos, shape=st.shape,
                            rate_requested=run.rate_requested, rate_scheduled=run.rate_scheduled,
                            rate_achieved=run.rate_achieved, stopped=stop, observer=run.cost, evidence=evidence,
                            lag_bound_ms=self.bound_ms, max_in_flight=st.max_in_flight)
        if slots is not None and self.counts_streams and run.level > slots:
            stats.over_slots = (f"{run.level:g} {self.unit} for {slots} slots ({self.slots_source}): "
                                f"{run.level - slots:g} wait in the server's queue, and their TTFT includes it")
        stats.limit = point_limit(stats, [p for p in points if p.repeat_of is None], self.slos, slots=slots,
                                  weight_bytes_per_token=self.weight_bytes_per_token, peak_gbs=self.peak_gbs,
                                  peak_source=self.peak_source, weight_bytes=self.weight_bytes)
        stats.rest, stats.repeat_of = rest, repeat_of
        if self.req_writer is not None:
            self.req_writer.write_many(run.samples)
        if self.pt_writer is not None:
            self.pt_writer.write(stats)
        if run.energy is not None:
            self.energies.append(PointEnergy(point=len(points), level=run.level, energy=run.energy))
        points.append(stats)
        return stats


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


def _repeat(points: list[PointStats], slos: Sequence[Slo], measure: Callable[..., PointStats | None],
            say: Callable[[str], None], unit: str) -> list[Repeat]:
    """Measure the first point and the knee again (once each, the first first); [] when the sweep stopped."""
    primary = [p for p in points if p.repeat_of is None and p.stopped is None]
    if not primary:
        return []
    first = primary[0]
    knee = find_knee(primary, slos).level
    targets = [(first, "first point" if knee != first.level else "first point and knee")]
    if knee is not None and knee != first.level:
        targets.append((next(p for p in primary if p.level == knee), "knee"))
    out = []
    for original, role in targets:
        say(f"independence: {role} {original.level:g} {unit} measured again after the search")
        again = measure(original.level, repeat_of=original.index)
        if again is None:
            break
        _say_point(say, again, unit)
        out.append(compare_repeat(original.level, role, (original.index, original.passed, original.bands),
                                  (again.index, again.passed, again.bands)))
    return out


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


def _curve(points: Sequence[PointStats]) -> list[tuple[float, float | None, float | None]]:
    return [(p.level, p.throughput.output_tok_s_wall, p.ttft_ms_p90) for p in points]


def _transport(s: LoadSample) -> bool:
    return not s.ok and s.http_status is None and not s.dropped


def _result(settings: LoadSettings, slos: Sequence[Slo], points: list[PointStats], search: Search,
            started: Any, t0: float, base_url: str, model: str, max_level: float, slots: int | None,
            slots_source: str | None, stopped: str | None, sampler: MemorySampler | None) -> CapacityResult:
    primary = [p for p in points if p.repeat_of is None]  # a repeat checks the answer; it is never part of it
    by_level = {p.level: p for p in primary if p.stopped is None}
    best = by_level.get(search.best) if search.best is not None else None
    knee = find_knee(primary, slos)
    saturation = find_saturation(_curve(list(by_level.values())))
    why = stopped
    if sampler is not None and sampler.tripped is not None:
        g = sampler.tripped
        why = f"memory guard {g.guard}: {g.observed_gib:.2f} GiB available < {g.threshold_gib:g} GiB"
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
