"""Load shapes on one endpoint: closed-loop streams, open-loop arrivals, agent-shaped multi-turn sessions.

Every request is sent by `client.send` and recorded by `sample.build_sample`, so a load point carries the same
exact, fresh, paired per-request records as `servepack bench` (`LoadSample` adds where in the load it was sent).

This module owns the runner of points (`LoadRunner.run_point`): one point in this process, or spread over client
worker processes (`_spread`, `_collect`: started together, stopped together on Ctrl-C or a worker that died, none
outliving the point), and the point's per-request records derived after it ends (`_finish`). Its parts:
`load_settings` (settings, samples, a point's run), `load_timing` (arrival schedule, achieved rate, launch lag and
the client's bound), `load_shapes` (the prompt pool and sending one request, `LoadSender`), `shapes/` (the table of
load shapes, each shape's plan and coroutine), `load_workers` (a client worker process's side).

Prompts are built before a point's clock starts (the tokenizer's round trips are not part of the load), and the
per-request records are derived after it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import time
from multiprocessing.connection import Connection, wait
from typing import Any

import httpx

from servepack.bench.liveness import ServerCheck
from servepack.bench.load_settings import (
    LOAD_SCHEMA,
    MAX_REQUESTS,
    MAX_WORKERS,
    LoadSample,
    LoadSettings,
    PointRun,
    Shape,
)
from servepack.bench.load_shapes import STOP_POLL_S, STREAM_GAP_S, LoadSender, PointState, drive, reply_text
from servepack.bench.load_timing import (
    LAG_BOUND_MS,
    LAG_BOUND_TTFT_SHARE,
    LaunchLag,
    achieved_rate,
    client_lag_bound,
    launch_lag,
)
from servepack.bench.load_workers import WorkerJob, WorkerResult, how_ended, receive, worker_main
from servepack.bench.observer import CpuMeter, ObserverCost
from servepack.bench.prompts import BuiltPrompt
from servepack.bench.sample import RequestSample, build_sample
from servepack.bench.shapes import shape_for
from servepack.bench.shapes.base import Arrivals
from servepack.bench.shapes.open_loop import arrival_offsets
from servepack.bench.wire import WireClient
from servepack.errors import EngineError
from servepack.host.energy import Mark

__all__ = [
    "LAG_BOUND_MS",
    "LAG_BOUND_TTFT_SHARE",
    "LOAD_SCHEMA",
    "MAX_REQUESTS",
    "MAX_WORKERS",
    "STOP_GRACE_S",
    "STREAM_GAP_S",
    "Arrivals",
    "LaunchLag",
    "LoadRunner",
    "LoadSample",
    "LoadSettings",
    "PointRun",
    "Shape",
    "achieved_rate",
    "arrival_offsets",
    "client_lag_bound",
    "launch_lag",
    "reply_text",
]

# A spread point asked to stop (Ctrl-C, a worker died): how long its workers have to send what they finished.
STOP_GRACE_S = 15.0


class LoadRunner(LoadSender):
    """Runs load points against one endpoint with one prompt builder (so no two points share a prompt)."""

    # -- one point --------------------------------------------------------------------------------------------

    def run_point(self, index: int, level: float) -> PointRun:
        """Send one point's load at `level`; every request it sent is in the returned samples."""
        s, shape = self.s, shape_for(self.s.shape)
        budget = self._budget(level)
        streams = max(1, int(level))
        built0 = self._built
        plan = shape.plan(self, index, level, budget, streams)
        built_before = self._built - built0
        # Connections opened before the clock: one a stream, or a second's arrivals (more open as needed).
        width = min(s.max_in_flight, shape.width(level, streams))
        limits = httpx.Limits(max_connections=width + 4, max_keepalive_connections=None)
        timeout = httpx.Timeout(s.timeout_s, connect=min(s.timeout_s, 10.0))
        meter = CpuMeter(self.server_pids)
        point: PointState | None = None
        stopped: str | None = None
        marks: list[Mark | None] = []

        async def go() -> PointState:
            nonlocal point, stopped
            # Requests go out through the lean WireClient; httpx only counts agent turns' tokens and asks /health
            # for the stall check (ServerCheck).
            async with httpx.AsyncClient(limits=limits, timeout=timeout) as client, \
                    WireClient(self.base_url, connect_timeout_s=min(s.timeout_s, 10.0)) as wire, \
                    ServerCheck(self.endpoint, client, s.stall_floor_s, server_pids=self.server_pids) as check:
                self.server_check = check
                await wire.warm(width)
                meter.start()
                marks.append(self.energy.mark() if self.energy else None)
                t0 = time.perf_counter()
                point = PointState(t0=t0, deadline=t0 + s.duration_s, budget=budget, t0_unix=time.time())
                stopped = await drive(shape, self, client, wire, point, streams, plan, stop=self.stop)
                return point

        started = time.time()
        spread: tuple[float, list[BuiltPrompt]] | None = None
        try:
            if s.workers > 1 and shape.spreads:
                point, worker_cpu, unused, interrupted, stopped = self._spread(streams, budget, plan.offsets,
                                                                               plan.prompts, plan.bodies, meter,
                                                                               marks)
                spread = (worker_cpu, unused)
                if interrupted:
                    raise KeyboardInterrupt
            else:
                asyncio.run(go())
        except KeyboardInterrupt:
            stopped = "interrupted (Ctrl-C)"
            raise
        finally:
            # The workers' own CPU time, counted from their start signal, is servepack's too.
            cost = meter.stop(others_cpu_s=spread[0] if spread is not None else 0.0)
            end = self.energy.mark() if self.energy and marks and marks[0] else None
            if point is None:
                point = PointState(t0=time.perf_counter(), deadline=0.0, budget=0)
            run = self._finish(index, level, point, cost, started, plan.offsets, stopped)
            run.prompts_built, run.prompts_built_during = built_before + point.built_during, point.built_during
            # What the point never sent goes back to the pool, still fresh, for the next point.
            unsent = spread[1] if spread is not None else shape.unsent(plan.prompts, point.used, point.issued)
            self.pool = unsent + self.pool
            shape.learn(self, len(run.samples), run.wall_s, streams)
            if self.energy and marks and marks[0] and end:
                run.energy = self.energy.window(marks[0], end, sum(x.generated_tokens or 0 for x in run.samples))
            self.last = run
        return run

    # -- worker processes -------------------------------------------------------------------------------------

    def _spread(self, streams: int, budget: int, offsets: list[float], prompts: list[BuiltPrompt],
                bodies: list[bytes], meter: CpuMeter, marks: list[Mark | None]
                ) -> tuple[PointState, float, list[BuiltPrompt], bool, str | None]:
        """Run the point in `workers` client processes: streams k (or arrivals i) with k mod W = w go to worker w,
        each on its own event loop and connections; all start on one wall-clock instant sent once every worker has
        its connections open, and send back what they sent. Returns the merged point, the workers' CPU-seconds,
        the prompts they did not use, whether Ctrl-C stopped it (the workers' finished requests are kept, as one
        process keeps them) and what failed (a worker that died or raised: its requests are missing)."""
        s, shape = self.s, shape_for(self.s.shape)
        by_stream = not shape.scheduled
        n = min(s.workers, streams if by_stream else max(1, len(prompts)))
        ctx = multiprocessing.get_context("spawn")
        jobs: list[WorkerJob] = []
        for w in range(n):
            if by_stream:
                ids = list(range(w, streams, n))
                share, shared = prompts[w::n], bodies[w::n]
                job_budget, offs = math.ceil(budget * len(ids) / streams), []
                width = len(ids)
            else:
                ids = list(range(w, len(prompts), n))
                share, shared = [prompts[i] for i in ids], [bodies[i] for i in ids]
                job_budget, offs = len(ids), [offsets[i] for i in ids]
                width = max(2, math.ceil(len(ids) / max(s.duration_s, 1.0)))
            settings = s.model_copy(update={"workers": 1, "seed": s.seed + 7919 * (w + 1),
                                            "max_in_flight": max(1, math.ceil(s.max_in_flight / n))})
            jobs.append(WorkerJob(base_url=self.base_url, model=self.endpoint.model, settings=settings,
                                  llama=self.llama, ignore_eos=self.ignore_eos, level=streams, ids=ids,
                                  offsets=offs, prompts=share, bodies=shared, budget=job_budget,
                                  width=min(width, settings.max_in_flight)))
        pipes: list[Connection] = []
        procs: list[Any] = []
        results: dict[int, WorkerResult] = {}
        failures: dict[int, str] = {}
        interrupted = False
        t0, t0_unix = time.perf_counter(), time.time()
        try:
            for job in jobs:
                mine, theirs = ctx.Pipe()
                proc = ctx.Process(target=worker_main, args=(job, theirs), daemon=True)
                proc.start()
                theirs.close()
                pipes.append(mine)
                procs.append(proc)
            for w, pipe in enumerate(pipes):
                got = receive(pipe) if pipe.poll(60) else None
                if got != "ready":
                    procs[w].join(1)
                    said = got[4] if isinstance(got, tuple) and len(got) == 5 else None
                    why = f": {said}" if said else (how_ended(procs[w]) or " within 60 s")
                    raise EngineError(f"client worker {w} (pid {procs[w].pid}) did not get ready{why}; run with "
                                      "--client-workers 1")
            meter.start()
            marks.append(self.energy.mark() if self.energy else None)
            t0, t0_unix = time.perf_counter() + 0.02, time.time() + 0.02
            for pipe in pipes:
                pipe.send(t0_unix)
            interrupted, halted = self._collect(pipes, procs, results, failures)
        finally:
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
                proc.join(5)
                if proc.is_alive():
                    proc.kill()
                    proc.join(5)
            for pipe in pipes:
                pipe.close()
        point = PointState(t0=t0, deadline=t0 + s.duration_s, budget=budget, t0_unix=t0_unix)
        cpu, unused = 0.0, []
        for w, job in enumerate(jobs):
            if w not in results:
                self.say(f"{failures[w]}; its requests are missing from this point, the other workers' are kept")
                continue
            sent, used, issued, cpu_s, err = results[w]
            if err:
                failures[w] = f"client worker {w} (pid {procs[w].pid}) failed: {err}"
                self.say(f"{failures[w]}; its requests are missing from this point, the other workers' are kept")
            point.sent.extend(sent)
            point.used += used
            point.issued += issued
            cpu += cpu_s
            unused += shape.unsent(job.prompts, used, issued)
        failure = "; ".join(failures[w] for w in sorted(failures)) or None
        if failure:
            failure += " during the point; its requests are missing (the point judges nothing; rerun, and if it " \
                       "recurs see the worker's cause: memory (dmesg), or fewer --client-workers)"
        if halted is not None:  # the runner's stop ended the point: that is why it stopped
            failure = halted if failure is None else f"{halted}; {failure}"
        return point, cpu, unused, interrupted, failure

    def _collect(self, pipes: list[Connection], procs: list[Any], results: dict[int, WorkerResult],
                 failures: dict[int, str]) -> tuple[bool, str | None]:
        """Wait for every started worker's answer; (whether Ctrl-C came meanwhile, the reason the runner's `stop`
        gave). A worker that dies is noticed at once (its process sentinel) and the others are asked to stop and send
        what they have; so is every worker on Ctrl-C, and when `stop` (asked every `STOP_POLL_S`, as `drive` asks
        it) gives a reason. Nothing waits past the point's duration + timeout + a minute."""
        s = self.s
        deadline = time.monotonic() + s.duration_s + s.timeout_s + 60
        pending = dict(enumerate(pipes))
        interrupted = stopping = False
        halted: str | None = None
        poll = STOP_POLL_S if self.stop is not None else 1.0

        def stop_all() -> None:
            nonlocal stopping, deadline
            if stopping:
                return
            stopping = True
            # In-flight requests are cancelled, as one process's Ctrl-C cancels them: the answers come at once.
            deadline = min(deadline, time.monotonic() + STOP_GRACE_S)
            for pipe in pending.values():
                with contextlib.suppress(OSError):
                    pipe.send("stop")

        while pending:
            try:
                left = deadline - time.monotonic()
                if left <= 0:
                    for w in pending:
                        failures[w] = f"client worker {w} (pid {procs[w].pid}) sent no answer in time"
                    break
                ready = wait([*pending.values(), *(procs[w].sentinel for w in pending)], timeout=min(left, poll))
                for w in [w for w, pipe in pending.items() if pipe in ready or procs[w].sentinel in ready]:
                    got = receive(pending[w])
                    if isinstance(got, tuple):
                        results[w] = got
                    else:  # EOF with no answer: the process died (or is dying)
                        procs[w].join(5)
                        failures[w] = f"client worker {w} (pid {procs[w].pid}) died{how_ended(procs[w])}"
                    del pending[w]
                if failures and pending:
                    stop_all()
                if halted is None and pending and self.stop is not None and (why := self.stop()) is not None:
                    halted = why
                    stop_all()
            except KeyboardInterrupt:
                if interrupted:
                    raise  # a second Ctrl-C: stop waiting for the workers' answers
                interrupted = True
                stop_all()
        return interrupted, halted

    def _finish(self, index: int, level: float, p: PointState, cost: ObserverCost, started: float,
                offsets: list[float], stopped: str | None) -> PointRun:
        s, shape = self.s, shape_for(self.s.shape)
        samples: list[LoadSample] = []
        t0_unix = started
        sends = [x.ex.t_sent_unix for x in p.sent if not x.dropped]
        if sends:
            t0_unix = min(sends)
        # Send times are from the point's start (its clock), so a late first send shows as lag, not as 0.
        start_unix = p.t0_unix or t0_unix
        ends = [x.ex.t_sent_unix + (x.ex.end_s or 0.0) for x in p.sent if not x.dropped]
        for x in sorted(p.sent, key=lambda x: x.ex.t_sent_unix):
            base = build_sample(x.ex, s.endpoint, context_tokens=s.prompt_tokens if not x.warm else x.prompt_tokens,
                                concurrency=max(1, int(level)) if shape.counts_streams else max(1, x.in_flight),
                                round_=index, stream=x.stream, warmup=False, nonce=x.nonce,
                                endpoint_prompt_tokens=x.prompt_tokens, exact=x.exact, gen_tokens=s.gen_tokens)
            cached = _cache_n(base)
            fields = base.model_dump(exclude={"schema_version"})
            sent_s = x.ex.t_sent_unix - start_unix
            lag = None
            if x.scheduled_s is not None and not x.dropped:
                lag = round((sent_s - x.scheduled_s) * 1000, 3)
            samples.append(LoadSample(**fields, point=index, shape=s.shape, level=level,
                                      scheduled_s=None if x.scheduled_s is None else round(x.scheduled_s, 6),
                                      sent_s=round(sent_s, 6), launch_lag_ms=lag,
                                      lateness_ms=lag if shape.scheduled else None, in_flight=x.in_flight,
                                      session=x.session, turn=x.turn, cache_n=cached,
                                      warm=x.warm or (shape.warm and bool(cached)), dropped=x.dropped))
        wall = (max(ends) - t0_unix) if ends else 0.0
        run = PointRun(level=level, samples=samples, wall_s=round(wall, 6), started_unix=t0_unix, cost=cost,
                       stopped=stopped)
        if shape.scheduled:
            planned = [o for o in offsets if o < s.duration_s]
            run.rate_requested = level
            run.rate_scheduled = achieved_rate(planned)
            run.rate_achieved = achieved_rate(sends)
        return run


def _cache_n(sample: RequestSample) -> int | None:
    t = sample.timings or {}
    if isinstance(t.get("cache_n"), int):
        return int(t["cache_n"])
    details = (sample.usage or {}).get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        return int(details["cached_tokens"])
    return None
