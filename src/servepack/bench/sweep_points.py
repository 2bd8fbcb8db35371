"""One capacity sweep while it runs (`Sweep`): the SLO search, the saturation probe and the repeats, each point
measured from a server at rest (a fresh one with `--fresh-server-per-point`), judged, named its limit and written the
moment it ends; `say_point` is the line a point prints. `bench.sweep.run_capacity` sets a sweep up and turns what it
left into capacity.json.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from servepack.bench.capacity import (
    PointStats,
    Search,
    Slo,
    find_knee,
    find_saturation,
    point_limit,
    point_stats,
)
from servepack.bench.load import LoadRunner, LoadSample, LoadSettings, PointRun
from servepack.bench.observer import PointWatch, local_pids
from servepack.bench.order import PointRest, Repeat, compare_repeat, wait_at_rest
from servepack.bench.roofline import WeightBytes
from servepack.bench.shapes import shape_for
from servepack.engine.base import Endpoint
from servepack.errors import EngineError, ServerDied
from servepack.host.energy import Energy
from servepack.host.memory import MemorySampler
from servepack.store import JsonlWriter
from servepack.strict import Strict

FRESH_FAILED: Final = "fresh server"  # how a stop before a fresh server served begins
MAX_POINTS = 24  # a sweep never measures more points than this, whatever the range


class PointEnergy(Strict):
    """The joules of one point's measured window, by meter, and per output token."""

    point: int
    level: float
    energy: Energy

def say_point(say: Callable[[str], None], p: PointStats, unit: str) -> None:
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

@dataclass
class Sweep:
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
        if self.counts_streams and st.max_requests < max_level:
            self.say(f"≤ {st.max_requests} requests a point cannot put more than {st.max_requests} {self.unit} in "
                     f"flight at once: a level above that is judged client-limited, never the knee (raise --requests "
                     f"to at least {max_level:g})")

    def run(self, max_level: float, *, knee_probe: bool, repeat_check: bool) -> None:
        """The SLO search, the saturation probe and the repeats, each point written as it ends; Ctrl-C or a point
        that must stop the sweep ends it (`stopped`, `pending`), the writers closed whatever happens."""
        try:
            self.watcher.start()  # in the try: the finally stops and joins its thread, whatever happens from here
            self.search_slos()
            if knee_probe:
                self.probe_saturation(max_level)
            if self.stopped is None and repeat_check:
                self.repeats = repeat_points(self.points, self.slos, self.measure, self.say, self.unit)
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
            say_point(self.say, stats, self.unit)
        if self.stopped is None and (level := self.search.next_level()) is not None:
            self.say(f"the search stops at the sweep's {MAX_POINTS} points with {level:g} {self.unit} still to try: "
                     "no knee is claimed (fewer levels to search: a higher --start, a lower maximum or a coarser "
                     "--rate-step)")

    def probe_saturation(self, max_level: float) -> None:
        """The SLO search stops at its bracket; saturation (throughput flat while latency climbs) may lie above it:
        keep doubling past the highest level measured, up to the maximum, until it shows."""
        while self.stopped is None and len(self.points) < MAX_POINTS:
            measured = [p for p in self.points if p.stopped is None]
            if not measured or find_saturation(curve(measured)).level is not None:
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
            say_point(self.say, stats, self.unit)  # not fed to the search: its bracket is the SLO answer

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

def repeat_points(points: list[PointStats], slos: Sequence[Slo], measure: Callable[..., PointStats | None],
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
        say_point(say, again, unit)
        out.append(compare_repeat(original.level, role, (original.index, original.passed, original.bands),
                                  (again.index, again.passed, again.bands)))
    return out

def _transport(s: LoadSample) -> bool:
    return not s.ok and s.http_status is None and not s.dropped


def curve(points: Sequence[PointStats]) -> list[tuple[float, float | None, float | None]]:
    """(level, output tok/s, p90 TTFT) a point: what the saturation finder reads."""
    return [(p.level, p.throughput.output_tok_s_wall, p.ttft_ms_p90) for p in points]
