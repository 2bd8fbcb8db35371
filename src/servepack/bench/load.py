"""Load shapes on one endpoint: closed-loop streams, open-loop arrivals, agent-shaped multi-turn sessions.

Every request is sent by `client.send` and recorded by `sample.build_sample`, so a load point carries the same
exact, fresh, paired per-request records as `servepack bench` (`LoadSample` adds where in the load it was sent).

- **closed**: `level` streams; each sends its next request when its previous one ends, until the point's request
  budget is spent or its duration is over (no new send after it; requests in flight finish).
- **open**: arrivals at `level` requests a second, constant or Poisson (seeded), scheduled on absolute times from
  the point's start, so a late wake-up never shifts the arrivals after it; the achieved rate is measured from the
  send times. At most `max_in_flight` requests are in flight; an arrival beyond that is recorded as dropped.
- **agent**: `level` concurrent sessions; each turn sends the whole conversation so far (its previous prompt, the
  assistant's reply and a tool result appended), so the server's prefix cache is really reused. `cache_n` is
  recorded per turn; every turn after the first is warm, and so is a first turn whose template opening the server
  reused: agent figures are never a claim's figures.

Launch lag: every request has a scheduled send (open: its planned arrival; closed and agent: the moment its
stream was free to send — a stream's first request at its start slot, the streams' starts staggered by
`stream_gap_s`, so N streams do not all ask for the wire in the same instant; later ones when the stream's previous
response ended) and an actual send (the request line on the wire). The difference is the launch lag: time the
client held a request back. A point whose lag p99 exceeds the client's bound (`client_lag_bound`), or that dropped
an arrival at the client's own in-flight bound, is client-limited: it measured the client, not the server.

Prompts are built before a point's clock starts (the tokenizer's round trips are not part of the load), and the
per-request records are derived after it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import multiprocessing
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from servepack.bench.client import PATHS, Exchange, StallBound, request_body, send
from servepack.bench.config import MAX_CONCURRENCY
from servepack.bench.observer import CpuMeter, ObserverCost
from servepack.bench.prompts import BuiltPrompt, EstimateTokenizer, PromptBuilder, Tokenizer
from servepack.bench.sample import RequestSample, build_sample
from servepack.bench.wire import WireClient
from servepack.engine.base import Endpoint
from servepack.errors import EngineError
from servepack.host.energy import Energy, EnergyMeter, Mark
from servepack.net import require_loopback

Shape = Literal["closed", "open", "agent"]
Arrivals = Literal["constant", "poisson"]
LOAD_SCHEMA = "servepack.bench.load_request/v1"
MAX_REQUESTS = 100_000  # per point, whatever the flags say
LAG_BOUND_MS = 10.0  # launch lag p99 above this marks a point client-limited (or a flag's bound) ...
LAG_BOUND_TTFT_SHARE = 0.05  # ... or this share of the tightest TTFT SLO bound, when that is larger
MAX_WORKERS = 32
# A spread point asked to stop (Ctrl-C, a worker died): how long its workers have to send what they finished.
STOP_GRACE_S = 15.0
STREAM_GAP_S = 0.002  # closed/agent: stream k starts k × gap after the point (at most 1 s for all of them)


class LoadSettings(BaseModel):
    """One load point's shape and bounds (the sweep changes only the level)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shape: Shape = "closed"
    arrivals: Arrivals = "constant"
    prompt_tokens: int = Field(256, ge=1, description="server-counted prompt tokens of a single-shot request")
    gen_tokens: int = Field(64, ge=1)
    duration_s: float = Field(60.0, gt=0, le=3600, description="no request is sent after this long into a point")
    max_requests: int = Field(200, ge=1, le=MAX_REQUESTS, description="requests per point at most")
    turns: int = Field(4, ge=1, le=64, description="agent: turns per session")
    tool_tokens: int = Field(64, ge=1, description="agent: tokens of the tool result appended each turn")
    seed: int = 20240917
    endpoint: Literal["chat", "completion"] = "chat"
    timeout_s: float = Field(120.0, gt=0)
    temperature: float = Field(0.0, ge=0)
    max_in_flight: int = Field(MAX_CONCURRENCY, ge=1, le=MAX_CONCURRENCY)
    stall_floor_s: float = Field(30.0, gt=0)
    workers: int = Field(1, ge=1, le=MAX_WORKERS, description="client processes the streams or arrivals are "
                         "spread over (closed and open shapes); 1: this process alone")
    client_lag_bound_ms: float | None = Field(None, gt=0, le=60_000, description="launch lag p99 above this "
                                              "marks a point client-limited (default: 10 ms, or 5% of the "
                                              "tightest TTFT SLO bound when that is larger)")

    @model_validator(mode="after")
    def _agent_chat(self) -> LoadSettings:
        if self.shape == "agent" and self.endpoint != "chat":
            raise ValueError("agent sessions are chat conversations: use the chat endpoint")
        if self.shape == "agent" and self.workers > 1:
            raise ValueError("agent sessions run in one client process: drop --client-workers for --shape agent")
        return self


class LoadSample(RequestSample):
    """One line of a load's requests.jsonl: a bench RequestSample plus where in the load it was sent."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal["servepack.bench.load_request/v1"] = LOAD_SCHEMA  # type: ignore[assignment]
    point: int = Field(description="sweep point index")
    shape: Shape
    level: float = Field(description="streams (closed), arrivals/s (open) or sessions (agent)")
    scheduled_s: float | None = Field(None, description="planned send, seconds from the point start (open: the "
                                      "arrival; closed/agent: when the stream was free to send)")
    sent_s: float = Field(description="actual send (wire), seconds from the point start")
    launch_lag_ms: float | None = Field(None, description="actual − scheduled send: how long the client held the "
                                        "request back (None: dropped)")
    lateness_ms: float | None = Field(None, description="open loop: actual − planned send (= launch_lag_ms)")
    in_flight: int = Field(description="requests in flight when this one was sent, itself included")
    session: int | None = None
    turn: int | None = None
    cache_n: int | None = Field(None, description="prompt tokens the server reused from its cache")
    warm: bool = Field(False, description="the prompt extends an earlier one (agent turns): never a claim figure")
    dropped: bool = Field(False, description="open loop: not sent, the in-flight bound was reached")


@dataclass
class PointRun:
    """What one load point did: its samples, its wall time, its arrival rates and what it cost to observe."""

    level: float
    samples: list[LoadSample]
    wall_s: float
    started_unix: float
    cost: ObserverCost
    rate_requested: float | None = None
    rate_scheduled: float | None = None
    rate_achieved: float | None = None
    stopped: str | None = None
    prompts_built: int = 0
    prompts_built_during: int = 0
    energy: Energy | None = None  # joules over the measured window, when the runner has a meter


def client_lag_bound(explicit_ms: float | None, ttft_bounds_ms: list[float]) -> tuple[float, str]:
    """The launch-lag p99 above which a point is client-limited, and where that bound came from."""
    if explicit_ms is not None:
        return explicit_ms, "set (--client-lag-bound)"
    if ttft_bounds_ms:
        # The looser of the two: below 10 ms an event loop's own timing noise on any host dominates, and with a
        # loose TTFT SLO a lag of 5% of its bound neither moves a TTFT verdict nor the offered load by much.
        tight = min(ttft_bounds_ms)
        share = round(LAG_BOUND_TTFT_SHARE * tight, 3)
        if share > LAG_BOUND_MS:
            return share, f"{LAG_BOUND_TTFT_SHARE:.0%} of the TTFT SLO bound {tight:g} ms"
        return LAG_BOUND_MS, (f"default {LAG_BOUND_MS:g} ms ({LAG_BOUND_TTFT_SHARE:.0%} of the TTFT SLO bound "
                              f"{tight:g} ms is less)")
    return LAG_BOUND_MS, f"default {LAG_BOUND_MS:g} ms (no TTFT SLO)"


@dataclass(frozen=True)
class LaunchLag:
    """A point's launch lag figures and whether they say the client, not the server, limited it."""

    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    bound_ms: float
    client_limited: bool
    reason: str | None


def launch_lag(samples: list[LoadSample], bound_ms: float, max_in_flight: int | None = None) -> LaunchLag:
    """p50/p99/max of the sent requests' launch lag; client-limited when p99 > bound or an arrival was dropped."""
    lags = sorted(s.launch_lag_ms for s in samples if s.launch_lag_ms is not None)

    def q(f: float) -> float | None:
        if not lags:
            return None
        pos = (len(lags) - 1) * f
        lo = math.floor(pos)
        hi = min(lo + 1, len(lags) - 1)
        return round(lags[lo] + (lags[hi] - lags[lo]) * (pos - lo), 3)

    p50, p99 = q(0.5), q(0.99)
    dropped = sum(1 for s in samples if s.dropped)
    reason = None
    if p99 is not None and p99 > bound_ms:
        reason = (f"launch lag p99 {p99:,.1f} ms > the client bound {bound_ms:g} ms: the client could not send "
                  "on time, so this point measured the client, not the server")
    elif dropped:
        bound = f" ({max_in_flight} in flight)" if max_in_flight else ""
        reason = f"{dropped} arrival{'s' if dropped != 1 else ''} dropped at the client's in-flight bound{bound}"
    return LaunchLag(p50_ms=p50, p99_ms=p99, max_ms=lags[-1] if lags else None, bound_ms=bound_ms,
                     client_limited=reason is not None, reason=reason)


def arrival_offsets(rate: float, n: int, arrivals: Arrivals, seed: int) -> list[float]:
    """Planned send times (seconds from the start) of `n` arrivals at `rate` a second; the first at 0."""
    if rate <= 0 or n <= 0:
        return []
    if arrivals == "constant":
        return [i / rate for i in range(n)]
    rng = random.Random(seed)
    out, t = [0.0], 0.0
    for _ in range(n - 1):
        t += rng.expovariate(rate)
        out.append(t)
    return out


def achieved_rate(send_times: list[float]) -> float | None:
    """Arrivals a second between the first and the last send: (n − 1) ÷ span."""
    if len(send_times) < 2:
        return None
    span = max(send_times) - min(send_times)
    return (len(send_times) - 1) / span if span > 0 else None


def reply_text(events: list[tuple[float, bytes]]) -> str:
    """The assistant's streamed content, joined (what the next agent turn appends)."""
    out = []
    for _, data in events:
        if data == b"[DONE]":
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            continue
        for choice in (obj.get("choices") or []) if isinstance(obj, dict) else []:
            content = (choice.get("delta") or {}).get("content")
            if isinstance(content, str):
                out.append(content)
    return "".join(out)


@dataclass
class _Sent:
    ex: Exchange
    prompt_tokens: int
    exact: bool
    nonce: str
    stream: int
    in_flight: int
    scheduled_s: float | None = None
    session: int | None = None
    turn: int | None = None
    warm: bool = False
    dropped: bool = False


@dataclass
class _Point:
    """The mutable state of one point while it runs."""

    t0: float
    deadline: float
    budget: int
    t0_unix: float = 0.0
    used: int = 0
    built_during: int = 0
    sent: list[_Sent] = field(default_factory=list)
    in_flight: int = 0
    issued: int = 0

    def take(self) -> bool:
        """One more request may be sent: the budget is not spent and the duration is not over."""
        if self.issued >= self.budget or time.perf_counter() >= self.deadline:
            return False
        self.issued += 1
        return True


class LoadRunner:
    """Runs load points against one endpoint with one prompt builder (so no two points share a prompt)."""

    def __init__(self, endpoint: Endpoint, settings: LoadSettings, tokenizer: Tokenizer, *, llama: bool,
                 ignore_eos: bool = True, server_pids: list[int] | None = None,
                 progress: Callable[[str], None] | None = None, energy: EnergyMeter | None = None) -> None:
        self.energy = energy
        self.base_url = require_loopback(endpoint.base_url.rstrip("/"), "the endpoint")
        self.endpoint, self.s, self.tok, self.llama = endpoint, settings, tokenizer, llama
        self.ignore_eos = ignore_eos
        self.builder = PromptBuilder(tokenizer, seed=settings.seed)
        # Prompts built but never sent, shared by the points: a point takes from here first, and what it did not
        # send comes back (still fresh), so no point builds its whole request budget when its duration ends it.
        self.pool: list[BuiltPrompt] = []
        self._per_stream_rps: float | None = None  # closed loop: requests a second a stream sent, last point
        self._built = 0
        self.server_pids = server_pids or []
        self.say = progress or (lambda _: None)
        self.url = f"{self.base_url}{PATHS[settings.endpoint]}"
        self.last: PointRun | None = None

    # -- building ---------------------------------------------------------------------------------------------

    def _body(self, text: str, *, cache: bool) -> dict[str, Any]:
        return request_body(self.s.endpoint, self.endpoint.model, text, self.s.gen_tokens,
                            temperature=self.s.temperature, cache_prompt=cache if self.llama else None,
                            ignore_eos=self.ignore_eos)

    def _budget(self, level: float) -> int:
        s = self.s
        if s.shape == "open":
            return max(1, min(s.max_requests, math.ceil(level * s.duration_s)))
        return s.max_requests

    def _prompts(self, n: int) -> list[BuiltPrompt]:
        """`n` prompts: the pool's first, then new ones."""
        out = self.pool[:n]
        del self.pool[:n]
        more = n - len(out)
        out += [self.builder.build(self.s.prompt_tokens) for _ in range(more)]
        self._built += more
        return out

    def _closed_need(self, level: int, budget: int) -> int:
        """Prompts a closed point needs before its clock: its budget, or (after a first point) what the last point's
        per-stream rate says this one can send in its duration, with a margin; more are built if it runs short."""
        if self._per_stream_rps is None:
            return budget
        est = math.ceil(self._per_stream_rps * level * self.s.duration_s * 1.3) + 2 * level
        return max(1, min(budget, est))

    def _encoded(self, prompt: BuiltPrompt) -> bytes:
        """A single-shot request's JSON body, encoded before the point's clock starts."""
        return json.dumps(self._body(prompt.body, cache=False)).encode()

    # -- sending ----------------------------------------------------------------------------------------------

    async def _send(self, wire: WireClient, p: _Point, body: dict[str, Any] | bytes, item: _Sent) -> Exchange:
        p.in_flight += 1
        item.in_flight = p.in_flight
        try:
            ex = await send(wire, self.url, body, self.s.timeout_s, StallBound(floor_s=self.s.stall_floor_s))
        finally:
            p.in_flight -= 1
        item.ex = ex
        p.sent.append(item)
        return ex

    @staticmethod
    async def _start_slot(p: _Point, k: int, streams: int) -> float:
        """Wait for stream k's start slot (k × gap after the point's start); its offset in seconds."""
        offset = k * min(STREAM_GAP_S, 1.0 / max(streams, 1))
        delay = p.t0 + offset - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        return offset

    async def _closed(self, wire: WireClient, p: _Point, level: int, prompts: list[BuiltPrompt],
                      bodies: list[bytes], ids: list[int] | None = None) -> None:
        lock = asyncio.Lock()

        async def next_prompt() -> tuple[BuiltPrompt, bytes]:
            i = p.used
            p.used += 1
            while i >= len(prompts):
                # Ran short of prompts built before the clock: build a stream's worth more off the event loop
                # (the wait shows in this request's launch lag, as it should).
                async with lock:
                    if i >= len(prompts):
                        more = await asyncio.to_thread(self._prompts, max(level, 8))
                        p.built_during += len(more)
                        prompts.extend(more)
                        bodies.extend(self._encoded(x) for x in more)
            return prompts[i], bodies[i]

        async def stream(k: int) -> None:
            ready = await self._start_slot(p, k, level)
            while p.take():
                prompt, body = await next_prompt()
                await self._send(wire, p, body,
                                 _Sent(Exchange(0.0), prompt.endpoint_tokens, prompt.exact, prompt.nonce, k, 0,
                                       scheduled_s=ready))
                ready = time.perf_counter() - p.t0

        await asyncio.gather(*(stream(k) for k in (ids if ids is not None else range(level))))

    async def _open(self, wire: WireClient, p: _Point, offsets: list[float], prompts: list[BuiltPrompt],
                    bodies: list[bytes], ids: list[int] | None = None) -> None:
        tasks: list[asyncio.Future[Exchange]] = []
        try:
            await self._arrive(wire, p, offsets, prompts, bodies, ids, tasks)
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            # Stopped (Ctrl-C, a spread point told to stop): no request is left running past the point's client.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _arrive(self, wire: WireClient, p: _Point, offsets: list[float], prompts: list[BuiltPrompt],
                      bodies: list[bytes], ids: list[int] | None, tasks: list[asyncio.Future[Exchange]]) -> None:
        """Send each arrival at its offset (a task each, into `tasks`)."""
        for j, (off, prompt, body) in enumerate(zip(offsets, prompts, bodies, strict=False)):
            i = ids[j] if ids is not None else j
            if off >= self.s.duration_s:
                break
            delay = p.t0 + off - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            p.issued += 1
            item = _Sent(Exchange(time.time()), prompt.endpoint_tokens, prompt.exact, prompt.nonce, i, p.in_flight,
                         scheduled_s=off)
            if p.in_flight >= self.s.max_in_flight:
                item.dropped = True
                item.ex.error = f"dropped: {p.in_flight} requests in flight (the bound)"
                item.ex.end_s = 0.0
                p.sent.append(item)
                continue
            tasks.append(asyncio.ensure_future(self._send(wire, p, body, item)))

    async def _count(self, client: httpx.AsyncClient, messages: list[dict[str, Any]]) -> tuple[int, bool]:
        """The conversation's prompt tokens as the server counts them (/apply-template + /tokenize)."""
        if self.tok.exact:
            # Both calls are read-only, so a pooled connection the server closed after the previous stream
            # ("disconnected without sending a response") is retried once on a fresh one, not given up for an
            # estimate (that under-read a warm turn by 47-65 tokens, about one count in six).
            for attempt in (1, 2):
                try:
                    r = await client.post(f"{self.base_url}/apply-template", json={"messages": messages})
                    r.raise_for_status()
                    text = r.json()["prompt"]
                    t = await client.post(f"{self.base_url}/tokenize",
                                          json={"content": text, "add_special": True, "parse_special": True})
                    t.raise_for_status()
                    return len(t.json()["tokens"]), True
                except (httpx.RemoteProtocolError, httpx.ConnectError, httpx.ReadError):
                    if attempt == 2:
                        break
                except (httpx.HTTPError, ValueError, KeyError, TypeError):
                    break
        return sum(len(self.tok.tokenize(str(m.get("content") or ""))) for m in messages), False

    async def _agent(self, client: httpx.AsyncClient, wire: WireClient, p: _Point, level: int,
                     firsts: list[BuiltPrompt], tools: list[BuiltPrompt]) -> None:
        sessions = iter(enumerate(firsts))
        tool_it = iter(tools)

        async def worker(k: int) -> None:
            ready: float | None = await self._start_slot(p, k, level)
            for sid, first in sessions:
                messages: list[dict[str, Any]] = [{"role": "user", "content": first.body}]
                count, exact = first.endpoint_tokens, first.exact
                for turn in range(self.s.turns):
                    if not p.take():
                        return
                    if turn:
                        count, exact = await self._count(client, messages)
                    body = self._body("", cache=True)
                    body["messages"] = list(messages)
                    # Counting a turn's tokens is prompt building, not load: the turn is due once it is counted.
                    due = ready if ready is not None else time.perf_counter() - p.t0
                    ex = await self._send(wire, p, body, _Sent(Exchange(0.0), count, exact, first.nonce, k, 0,
                                                                 scheduled_s=due, session=sid, turn=turn,
                                                                 warm=turn > 0))
                    ready = None
                    if ex.error or ex.status != 200:
                        break
                    tool = next(tool_it, None)
                    messages += [{"role": "assistant", "content": reply_text(ex.events)},
                                 {"role": "tool", "tool_call_id": f"call-{sid}-{turn}",
                                  "content": tool.body if tool else "ok"}]

        await asyncio.gather(*(worker(k) for k in range(level)))

    # -- one point --------------------------------------------------------------------------------------------

    def run_point(self, index: int, level: float) -> PointRun:
        """Send one point's load at `level`; every request it sent is in the returned samples."""
        s = self.s
        budget = self._budget(level)
        streams = max(1, int(level))
        offsets: list[float] = []
        tools: list[BuiltPrompt] = []
        built0 = self._built
        if s.shape == "open":
            offsets = arrival_offsets(level, budget, s.arrivals, s.seed + index)
            prompts = self._prompts(sum(1 for o in offsets if o < s.duration_s))
        elif s.shape == "agent":
            prompts = self._prompts(math.ceil(budget / s.turns) + streams)
            tools = [self.builder.build(s.tool_tokens) for _ in range(budget)]
        else:
            prompts = self._prompts(self._closed_need(streams, budget))
        built_before = self._built - built0
        bodies = [self._encoded(x) for x in prompts] if s.shape != "agent" else []
        # Connections opened before the clock: one a stream, or a second's arrivals (more open as needed).
        width = min(s.max_in_flight, streams if s.shape != "open" else max(2, math.ceil(level)))
        limits = httpx.Limits(max_connections=width + 4, max_keepalive_connections=None)
        timeout = httpx.Timeout(s.timeout_s, connect=min(s.timeout_s, 10.0))
        meter = CpuMeter(self.server_pids)
        point: _Point | None = None
        stopped: str | None = None
        marks: list[Mark | None] = []

        async def go() -> _Point:
            nonlocal point
            # Requests go out through the lean WireClient; httpx only counts agent turns' tokens.
            async with httpx.AsyncClient(limits=limits, timeout=timeout) as client, \
                    WireClient(self.base_url, connect_timeout_s=min(s.timeout_s, 10.0)) as wire:
                await wire.warm(width)
                meter.start()
                marks.append(self.energy.mark() if self.energy else None)
                t0 = time.perf_counter()
                point = _Point(t0=t0, deadline=t0 + s.duration_s, budget=budget, t0_unix=time.time())
                if s.shape == "open":
                    await self._open(wire, point, offsets, prompts, bodies)
                elif s.shape == "agent":
                    await self._agent(client, wire, point, streams, prompts, tools)
                else:
                    await self._closed(wire, point, streams, prompts, bodies)
                return point

        started = time.time()
        spread: tuple[float, list[BuiltPrompt]] | None = None
        try:
            if s.workers > 1 and s.shape != "agent":
                point, worker_cpu, unused, interrupted, stopped = self._spread(streams, budget, offsets, prompts,
                                                                               bodies, meter, marks)
                spread = (worker_cpu, unused)
                if interrupted:
                    raise KeyboardInterrupt
            else:
                asyncio.run(go())
        except KeyboardInterrupt:
            stopped = "interrupted (Ctrl-C)"
            raise
        finally:
            cost = meter.stop()
            if spread is not None and spread[0]:
                # The workers' own CPU time, counted from their start signal (process_time sees only this one).
                client = cost.client_cpu_s + spread[0]
                cost = cost.model_copy(update={
                    "client_cpu_s": round(client, 6),
                    "ratio": round(client / cost.server_cpu_s, 6) if cost.server_cpu_s else None})
            end = self.energy.mark() if self.energy and marks and marks[0] else None
            if point is None:
                point = _Point(t0=time.perf_counter(), deadline=0.0, budget=0)
            run = self._finish(index, level, point, cost, started, offsets, stopped)
            run.prompts_built, run.prompts_built_during = built_before + point.built_during, point.built_during
            # What the point never sent goes back to the pool, still fresh, for the next point.
            if spread is not None:
                self.pool = spread[1] + self.pool
                if s.shape == "closed" and run.wall_s > 0 and run.samples:
                    self._per_stream_rps = len(run.samples) / run.wall_s / streams
            elif s.shape == "closed":
                self.pool = prompts[point.used:] + self.pool
                if run.wall_s > 0 and run.samples:
                    self._per_stream_rps = len(run.samples) / run.wall_s / streams
            elif s.shape == "open":
                self.pool = prompts[point.issued:] + self.pool
            if self.energy and marks and marks[0] and end:
                run.energy = self.energy.window(marks[0], end, sum(x.generated_tokens or 0 for x in run.samples))
            self.last = run
        return run

    # -- worker processes -------------------------------------------------------------------------------------

    def _spread(self, streams: int, budget: int, offsets: list[float], prompts: list[BuiltPrompt],
                bodies: list[bytes], meter: CpuMeter, marks: list[Mark | None]
                ) -> tuple[_Point, float, list[BuiltPrompt], bool, str | None]:
        """Run the point in `workers` client processes: streams k (or arrivals i) with k mod W = w go to worker w,
        each on its own event loop and connections; all start on one wall-clock instant sent once every worker has
        its connections open, and send back what they sent. Returns the merged point, the workers' CPU-seconds,
        the prompts they did not use, whether Ctrl-C stopped it (the workers' finished requests are kept, as one
        process keeps them) and what failed (a worker that died or raised: its requests are missing)."""
        s = self.s
        closed = s.shape == "closed"
        n = min(s.workers, streams if closed else max(1, len(prompts)))
        ctx = multiprocessing.get_context("spawn")
        jobs: list[_WorkerJob] = []
        for w in range(n):
            if closed:
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
            jobs.append(_WorkerJob(base_url=self.base_url, model=self.endpoint.model, settings=settings,
                                   llama=self.llama, ignore_eos=self.ignore_eos, level=streams, ids=ids,
                                   offsets=offs, prompts=share, bodies=shared, budget=job_budget,
                                   width=min(width, settings.max_in_flight)))
        pipes: list[Connection] = []
        procs: list[Any] = []
        results: dict[int, _WorkerResult] = {}
        failures: dict[int, str] = {}
        interrupted = False
        t0, t0_unix = time.perf_counter(), time.time()
        try:
            for job in jobs:
                mine, theirs = ctx.Pipe()
                proc = ctx.Process(target=_worker_main, args=(job, theirs), daemon=True)
                proc.start()
                theirs.close()
                pipes.append(mine)
                procs.append(proc)
            for w, pipe in enumerate(pipes):
                got = _recv(pipe) if pipe.poll(60) else None
                if got != "ready":
                    procs[w].join(1)
                    said = got[4] if isinstance(got, tuple) and len(got) == 5 else None
                    why = f": {said}" if said else (_ended(procs[w]) or " within 60 s")
                    raise EngineError(f"client worker {w} (pid {procs[w].pid}) did not get ready{why}; run with "
                                      "--client-workers 1")
            meter.start()
            marks.append(self.energy.mark() if self.energy else None)
            t0, t0_unix = time.perf_counter() + 0.02, time.time() + 0.02
            for pipe in pipes:
                pipe.send(t0_unix)
            interrupted = self._collect(pipes, procs, results, failures)
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
        point = _Point(t0=t0, deadline=t0 + s.duration_s, budget=budget, t0_unix=t0_unix)
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
            unused += job.prompts[used if closed else issued:]
        failure = "; ".join(failures[w] for w in sorted(failures)) or None
        if failure:
            failure += " during the point; its requests are missing (the point judges nothing; rerun, and if it " \
                       "recurs see the worker's cause: memory (dmesg), or fewer --client-workers)"
        return point, cpu, unused, interrupted, failure

    def _collect(self, pipes: list[Connection], procs: list[Any], results: dict[int, _WorkerResult],
                 failures: dict[int, str]) -> bool:
        """Wait for every started worker's answer; True when Ctrl-C came meanwhile. A worker that dies is noticed
        at once (its process sentinel) and the others are asked to stop and send what they have; so is every
        worker on Ctrl-C. Nothing waits past the point's duration + timeout + a minute."""
        s = self.s
        deadline = time.monotonic() + s.duration_s + s.timeout_s + 60
        pending = dict(enumerate(pipes))
        interrupted = stopping = False

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
                ready = wait([*pending.values(), *(procs[w].sentinel for w in pending)], timeout=min(left, 1.0))
                for w in [w for w, pipe in pending.items() if pipe in ready or procs[w].sentinel in ready]:
                    got = _recv(pending[w])
                    if isinstance(got, tuple):
                        results[w] = got
                    else:  # EOF with no answer: the process died (or is dying)
                        procs[w].join(5)
                        failures[w] = f"client worker {w} (pid {procs[w].pid}) died{_ended(procs[w])}"
                    del pending[w]
                if failures and pending:
                    stop_all()
            except KeyboardInterrupt:
                if interrupted:
                    raise  # a second Ctrl-C: stop waiting for the workers' answers
                interrupted = True
                stop_all()
        return interrupted

    async def _work(self, job: _WorkerJob, conn: Connection) -> tuple[list[_Sent], int, int, float]:
        """One worker's share of a point (in its own process). "stop" from the parent (Ctrl-C, another worker
        died), or the parent gone, ends it early: in-flight requests are cancelled, the finished ones sent back."""
        s = self.s
        async with WireClient(self.base_url, connect_timeout_s=min(s.timeout_s, 10.0)) as wire:
            await wire.warm(job.width)
            conn.send("ready")
            t0_unix = await asyncio.to_thread(conn.recv)
            cpu0 = time.process_time()
            loop = asyncio.get_running_loop()
            halt = asyncio.Event()

            def heard() -> None:
                with contextlib.suppress(EOFError, OSError):
                    conn.recv()
                loop.remove_reader(conn.fileno())
                halt.set()

            loop.add_reader(conn.fileno(), heard)
            delay = t0_unix - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            t0 = time.perf_counter() - (time.time() - t0_unix)  # the shared instant on this process's clock
            p = _Point(t0=t0, deadline=t0 + s.duration_s, budget=job.budget, t0_unix=t0_unix)
            prompts, bodies = list(job.prompts), list(job.bodies)
            load = asyncio.ensure_future(self._open(wire, p, job.offsets, prompts, bodies, ids=job.ids)
                                         if s.shape == "open" else
                                         self._closed(wire, p, job.level, prompts, bodies, ids=job.ids))
            stop = asyncio.ensure_future(halt.wait())
            try:
                await asyncio.wait({load, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (load, stop):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(conn.fileno())
            return p.sent, p.used, p.issued, time.process_time() - cpu0

    def _finish(self, index: int, level: float, p: _Point, cost: ObserverCost, started: float,
                offsets: list[float], stopped: str | None) -> PointRun:
        s = self.s
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
                                concurrency=max(1, int(level)) if s.shape != "open" else max(1, x.in_flight),
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
                                      lateness_ms=lag if s.shape == "open" else None, in_flight=x.in_flight,
                                      session=x.session, turn=x.turn, cache_n=cached,
                                      warm=x.warm or (s.shape == "agent" and bool(cached)), dropped=x.dropped))
        wall = (max(ends) - t0_unix) if ends else 0.0
        run = PointRun(level=level, samples=samples, wall_s=round(wall, 6), started_unix=t0_unix, cost=cost,
                       stopped=stopped)
        if s.shape == "open":
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


@dataclass
class _WorkerJob:
    """One client worker's share of a point (pickled to its process)."""

    base_url: str
    model: str
    settings: LoadSettings
    llama: bool
    ignore_eos: bool
    level: int
    ids: list[int]
    offsets: list[float]
    prompts: list[BuiltPrompt]
    bodies: list[bytes]
    budget: int
    width: int


_WorkerResult = tuple[list[_Sent], int, int, float, str | None]


def _recv(pipe: Connection) -> Any:
    """The next message on a worker's pipe, or None at its end (the worker exited or died)."""
    try:
        return pipe.recv() if pipe.poll(0) else None
    except (EOFError, OSError):
        return None


def _ended(proc: Any) -> str:
    """How a worker process ended, for the line that says so ("" while it runs)."""
    code = proc.exitcode
    if code is None:
        return ""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f" (killed by {signal.Signals(-code).name})"
        return f" (killed by signal {-code})"
    return f" (exit code {code})"


def _worker_main(job: _WorkerJob, conn: Connection) -> None:
    """A client worker process: send its share, send back what it sent. Ctrl-C is the parent's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        # Prompts come built; one that runs short is built here by estimate (and flagged not sized exactly).
        runner = LoadRunner(Endpoint(base_url=job.base_url, model=job.model, launched=False), job.settings,
                            EstimateTokenizer(), llama=job.llama, ignore_eos=job.ignore_eos)
        sent, used, issued, cpu = asyncio.run(runner._work(job, conn))
        with contextlib.suppress(OSError):  # the parent may be gone: nobody to tell
            conn.send((sent, used, issued, cpu, None))
    except Exception as exc:  # reported to the parent, which says it and keeps the other workers' requests
        with contextlib.suppress(OSError):
            conn.send(([], 0, 0, 0.0, f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()
