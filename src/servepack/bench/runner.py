"""run_bench: prompts → cells of streamed requests → requests.jsonl as measured → server_bench.json.

A cell's rounds are points of the `round` shape (bench/shapes/rounds.py), sent by a capacity point's sender
(`LoadSender`, here with the cell's stall bound) and driven by the same point driver (`load_shapes.drive`): what a
cell adds is its own: warmups, the sequential rule over rounds, rounds set aside and replaced, /metrics over a cell."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from servepack.bench import server_metrics
from servepack.bench.client import PATHS, StallBound, StreamExchange, request_body
from servepack.bench.config import BenchSettings
from servepack.bench.liveness import ServerCheck
from servepack.bench.llama_bench import LlamaBenchResult, read_result, shape_ratios
from servepack.bench.load_settings import LoadSettings
from servepack.bench.load_shapes import LoadSender, PointState, drive
from servepack.bench.observer import CpuMeter, local_pids
from servepack.bench.prompts import BuiltPrompt, EstimateTokenizer, PromptBuilder, ServerTokenizer, Tokenizer
from servepack.bench.roofline import Roofline, probe_bandwidth_gbs, roofline
from servepack.bench.sample import RequestSample, aside_reason, build_sample
from servepack.bench.shapes.base import PointPlan
from servepack.bench.shapes.rounds import ROUND
from servepack.bench.stats import StopReason, describe, keep_sampling, quantile
from servepack.bench.summary import (
    BenchSummary,
    Cell,
    CellEnergy,
    Fact,
    all_fresh,
    cell_summary,
    metric_values,
    prompt_token_report,
)
from servepack.bench.wire import WireClient
from servepack.engine.base import Endpoint
from servepack.errors import ServepackError, ServerDied
from servepack.host.contention import ContentionSummary, ContentionWatch
from servepack.host.energy import EnergyMeter
from servepack.host.memory import MemorySampler
from servepack.progress import quiet
from servepack.store import JsonlWriter, ResultsDir, rfc3339, utc_now

SUMMARY_NAME = "server_bench.json"
REQUESTS_NAME = "requests.jsonl"
STALLS_IN_A_ROW = 3  # then the server is taken as stalled and the bench stops
QUIET_WINDOW_S = 0.5  # after a contended sample, the host is read in windows this long until one is quiet


def probe_server(client: httpx.Client, base_url: str, endpoint: str) -> tuple[bool, dict[str, Fact], dict[str, Any]]:
    """Is it llama-server, and which of its features answer? Missing ones become "unavailable" facts."""
    facts: dict[str, Fact] = {}
    props: dict[str, Any] = {}
    try:
        r = client.get(f"{base_url}/props")
        if r.status_code == 200 and isinstance(r.json(), dict):
            props = r.json()
    except (httpx.HTTPError, ValueError):
        pass
    llama = "default_generation_settings" in props or "build_info" in props
    facts["server.props"] = Fact(state="known", value={k: props.get(k) for k in ("build_info", "total_slots",
                                                                                 "model_path")}) if llama else \
        Fact(state="unavailable", reason="no llama-server /props")

    def works(path: str, body: dict[str, Any]) -> bool:
        try:
            return client.post(f"{base_url}{path}", json=body).status_code == 200
        except httpx.HTTPError:
            return False

    has_tok = works("/tokenize", {"content": "probe"})
    facts["prompt.exact_tokens"] = Fact(state="known", value="/tokenize") if has_tok else \
        Fact(state="unavailable", reason="server has no /tokenize; prompt sizes are estimates")
    if endpoint == "chat":
        has_tpl = works("/apply-template", {"messages": [{"role": "user", "content": "probe"}]})
        facts["prompt.chat_template"] = Fact(state="known", value="/apply-template") if has_tpl else \
            Fact(state="unavailable", reason="server has no /apply-template; template tokens are not counted")
        if has_tok and not has_tpl:
            facts["prompt.exact_tokens"] = Fact(state="unavailable", reason="no /apply-template for chat prompts")
    metrics = server_metrics.fetch(client, base_url)
    facts["server.metrics"] = Fact(state="known", value="/metrics") if metrics else \
        Fact(state="unavailable", reason="no Prometheus /metrics (llama-server needs --metrics)")
    facts["request.cache_prompt"] = Fact(state="known", value="sent") if llama else \
        Fact(state="unavailable", reason="cache_prompt is a llama-server field; not sent")
    return llama, facts, props


class _CellSender(LoadSender):
    """A capacity point's sender with a bench cell's stall bound: the references from the cell's requests so far
    (`_Run.stall_bound`), set before each round."""

    bound: StallBound | None = None

    def stall_bound(self) -> StallBound:
        return self.bound if self.bound is not None else super().stall_bound()


def _send_settings(s: BenchSettings) -> LoadSettings:
    """What the sender reads of a bench run's settings (a round's prompts come built, each for its cell's mark; the
    sender's shape is never asked: rounds are driven as the `round` shape)."""
    return LoadSettings(endpoint=s.endpoint, gen_tokens=s.gen_tokens, temperature=s.temperature,
                        timeout_s=s.timeout_s, stall_floor_s=s.stall_floor_s, prompt_tokens=min(s.context_marks))


class _Run:
    def __init__(self, endpoint: Endpoint, settings: BenchSettings, results: ResultsDir | None,
                 sampler: MemorySampler | None, say: Callable[[str], None],
                 watch: ContentionWatch | None = None) -> None:
        self.base_url, self.model = endpoint.base_url.rstrip("/"), endpoint.model
        self.energy_meter: EnergyMeter | None = None
        self.energy: list[CellEnergy] = []
        self.s, self.results = settings, results
        self.endpoint, self.sampler, self.say, self.watch = endpoint, sampler, say, watch
        self.writer: JsonlWriter | None = results.jsonl(REQUESTS_NAME) if results else None
        self.samples: list[RequestSample] = []
        self.seen_ok: list[RequestSample] = []  # every ok request, warmups included: the stall bounds' evidence
        self.stalls_in_a_row = 0
        self.cells: list[Cell] = []
        self.stopped: str | None = None
        self.ignore_eos = True
        self.llama = False
        self.check: ServerCheck | None = None  # the server's liveness while the cells run
        self.sender: _CellSender | None = None  # sends every request, once the server's tokenizer is known

    def record(self, batch: list[RequestSample]) -> None:
        for s in batch:
            if self.writer is not None:
                self.writer.write(s)
            if not s.warmup:
                self.samples.append(s)
            if s.ok:
                self.seen_ok.append(s)
            self.stalls_in_a_row = self.stalls_in_a_row + 1 if s.stalled else 0
        if self.stalls_in_a_row >= STALLS_IN_A_ROW and not self.stopped:
            self.stopped = (f"server stalled: {self.stalls_in_a_row} requests in a row got no byte within their "
                            "stall bound")

    def stall_bound(self, mark: int) -> StallBound:
        """The stall bound for the next request at `mark`: from this cell's gaps, else the run's so far."""
        own = [s for s in self.seen_ok if s.context_tokens == mark]
        pool = own or self.seen_ok
        gaps = sorted((b - a) / 1000 for s in pool for a, b in zip(s.chunk_ms, s.chunk_ms[1:], strict=False))
        firsts = [(s.ttfr_ms or 0) / 1000 * max(mark / max(s.context_tokens, 1), 1.0) for s in pool if s.ttfr_ms]
        return StallBound(floor_s=self.s.stall_floor_s, factor=self.s.stall_factor,
                          gap_ref_s=quantile(gaps, 0.9) if gaps else None, first_ref_s=max(firsts) if firsts else None,
                          probe=self.check.probe if self.check is not None else None)

    async def wait_quiet(self, until: float) -> tuple[float, bool]:
        """After a contended sample: read the host in QUIET_WINDOW_S windows until one is quiet, or to monotonic
        `until`, so the replacement is not taken in the same busy spell. Returns (seconds waited, quiet)."""
        assert self.watch is not None
        t0 = time.monotonic()
        while time.monotonic() + QUIET_WINDOW_S <= until and not self.stopped:
            start = time.time()
            await asyncio.sleep(QUIET_WINDOW_S)
            if not self.watch.reading(start, record=False).contended:
                return time.monotonic() - t0, True
        return time.monotonic() - t0, False

    def check_server(self, batch: list[tuple[StreamExchange, Any]]) -> None:
        """After a transport failure: has a process behind the endpoint gone? (An attached server's check is an HTTP
        request, which a stopped server fails: after a stall it waits for `ServerCheck.await_server` instead.)"""
        if any(ex.transport_failure and (self.endpoint.launched or not ex.stalled) for ex, _ in batch):
            self.endpoint.check_alive()

    async def _round(self, wire: WireClient, prompts: list[BuiltPrompt],
                     stall: StallBound | None = None) -> list[StreamExchange]:
        """One round: a point of the `round` shape on the shared sender and driver. Request k goes at its start slot
        (k × 2 ms: the rule a capacity point's streams start by), not all in one instant: a server reads a burst's
        requests one after another, and the later ones' TTFT would hold that wait before the server's clock starts
        (64 written within 1 ms: up to 4 ms on the scripted server, +1.8% at 250 ms). A guard that trips cancels
        the requests still in flight, each then recorded as stopped."""
        assert self.sender is not None
        self.sender.bound = stall
        plan = PointPlan(prompts=list(prompts), bodies=[self.sender.encode(p) for p in prompts])  # before the clock
        t0 = time.perf_counter()
        point = PointState(t0=t0, deadline=math.inf, budget=len(prompts), t0_unix=time.time())
        stop = self.sampler.stop_reason if self.sampler is not None else None
        why = await drive(ROUND, self.sender, None, wire, point, len(prompts), plan, stop=stop)
        if why is not None:
            self.stopped = why
        by_stream = {x.stream: x.ex for x in point.sent}
        return [by_stream.get(k) or StreamExchange(t_sent_unix=time.time(), error=f"stopped by {self.stopped}")
                for k in range(len(prompts))]

    def _samples(self, pairs: list[tuple[StreamExchange, BuiltPrompt]], mark: int, conc: int, round_: int,
                 warmup: bool) -> list[RequestSample]:
        out = []
        for i, (ex, p) in enumerate(pairs):
            host = None
            if self.watch is not None and not warmup:
                host = self.watch.reading(ex.t_sent_unix, ex.t_sent_unix + (ex.end_s or 0.0))
            out.append(build_sample(ex, self.s.endpoint, context_tokens=mark, concurrency=conc, round_=round_,
                                    stream=i, warmup=warmup, nonce=p.nonce, endpoint_prompt_tokens=p.endpoint_tokens,
                                    exact=p.exact, gen_tokens=self.s.gen_tokens, host=host))
            if not warmup:
                out[-1].set_aside = aside_reason(out[-1])
        return out

    async def _watch_deferred(self, client: httpx.AsyncClient, box: list[float]) -> None:
        while True:
            try:
                r = await client.get(f"{self.base_url}/metrics", timeout=5.0)
                value = server_metrics.parse_prometheus(r.text).get(server_metrics.DEFERRED)
                if value is not None:
                    box.append(value)
            except httpx.HTTPError:
                pass
            await asyncio.sleep(self.s.metrics_poll_s)

    async def cell(self, client: httpx.AsyncClient, wire: WireClient, sync: httpx.Client, builder: PromptBuilder,
                   mark: int, conc: int, has_metrics: bool) -> None:
        """Warmups, then rounds: at least `samples`, more under the sequential rule until the interval is tight."""
        warm = [builder.build(mark, warmup=True) for _ in range(self.s.warmup)]
        first = [[builder.build(mark) for _ in range(conc)] for _ in range(self.s.samples)]
        for i, p in enumerate(warm):
            ex = (await self._round(wire, [p], self.stall_bound(mark)))[0]
            self.record(self._samples([(ex, p)], mark, conc, -1 - i, warmup=True))
            self.check_server([(ex, p)])
        await wire.warm(conc)  # a connection a stream, open before the rounds: no measured request pays a connect
        before = server_metrics.fetch(sync, self.base_url) if has_metrics else None
        deferred: list[float] = []
        watcher = asyncio.ensure_future(self._watch_deferred(client, deferred)) if has_metrics and conc > 1 else None
        cell_samples: list[RequestSample] = []
        why: StopReason | None = None
        t_cell = time.monotonic()
        # Rounds: a round with a contended or stalled sample is set aside (recorded, in no figure) and replaced,
        # after waiting out what spoiled it; the sequential rule counts the other rounds. The budget: at most
        # sample_budget × the planned (minimum) rounds, besides the extra clean ones the interval rule asks for;
        # and once a round was set aside, at most max_cell_s seconds.
        min_rounds, max_rounds = self.s.samples, max(self.s.max_samples, self.s.samples)
        budget = max(min_rounds, math.ceil(min_rounds * self.s.sample_budget))
        e0 = self.energy_meter.mark() if self.energy_meter else None
        try:
            r = kept = 0
            while True:
                if self.stopped:
                    why = "stopped early"
                    break
                elapsed = time.monotonic() - t_cell
                if kept < r and elapsed >= self.s.max_cell_s:
                    why = "max time"
                    break
                stat = describe(metric_values(cell_samples, self.s.interval_metric), seed=self.s.bootstrap_seed)
                why = keep_sampling(stat, target_pct=self.s.interval_target_pct, rounds=kept, min_rounds=min_rounds,
                                    max_rounds=max_rounds, elapsed_s=elapsed, max_s=self.s.max_cell_s)
                if why is None and r - max(kept - min_rounds, 0) >= budget:
                    why = "sample budget"
                if why is not None:
                    break
                prompts = first[r] if r < len(first) else [builder.build(mark) for _ in range(conc)]
                t_round = time.monotonic()
                exchanges = await self._round(wire, prompts, self.stall_bound(mark))
                batch = self._samples(list(zip(exchanges, prompts, strict=True)), mark, conc, r, warmup=False)
                cell_samples += batch
                self.record(batch)
                self.check_server(list(zip(exchanges, prompts, strict=True)))
                r += 1
                if not any(s.set_aside for s in batch):
                    kept += 1
                    continue
                until = t_cell + self.s.max_cell_s
                if any(s.stalled for s in batch):
                    assert self.check is not None
                    waited, answered = await self.check.await_server(min(until, time.monotonic() + self.s.timeout_s))
                    if not answered:
                        self.endpoint.check_alive()  # gone: ServerDied; stopped still: the cell's time is spent
                    if waited >= 1:
                        self.say(f"ctx {mark} × {conc}: waited {waited:.0f} s for the server to answer after a stall")
                elif self.watch is not None:
                    # a spell the watch can see: wait a couple of rounds' time at most, then sample again
                    span = max(2 * QUIET_WINDOW_S, 2 * (time.monotonic() - t_round))
                    waited, calm = await self.wait_quiet(min(until, time.monotonic() + span))
                    if waited > 0:
                        self.say(f"ctx {mark} × {conc}: host contended; waited {waited:.1f} s for a quiet window"
                                 + ("" if calm else " (still busy)"))
        finally:
            if watcher is not None:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
            if self.energy_meter is not None and e0 is not None:
                tokens = sum(s.generated_tokens or 0 for s in cell_samples)
                self.energy.append(CellEnergy(context_tokens=mark, concurrency=conc,
                                              energy=self.energy_meter.window(e0, self.energy_meter.mark(), tokens)))
            after = server_metrics.fetch(sync, self.base_url) if has_metrics else None
            diff = server_metrics.diff_counters(before, after) if before and after else None
            self.cells.append(cell_summary(cell_samples, context_tokens=mark, concurrency=conc, settings=self.s,
                                           deferred_max=max(deferred) if deferred else None, metrics_diff=diff,
                                           stopped=self.stopped, interval_stop=why or "stopped early"))
        c = self.cells[-1]
        extra = [f"{len(c.failures) - c.stalls} failed" if len(c.failures) > c.stalls else "",
                 c.set_aside_text(),
                 f"{self.s.interval_metric} {c.interval.note}" if c.interval else ""]
        self.say(f"ctx {mark} × {conc}: TTFT {_f(c.ttft_ms.median, 0)} ms · prompt÷TTFT "
                 f"{_f(c.prompt_per_ttft_tok_s_client.median)} · prompt eval {_f(c.prompt_eval_tok_s_server.median)}"
                 f" · decode {_f(c.decode_tok_s_client.median)}"
                 f"/{_f(c.decode_tok_s_server.median)} tok/s (client/server) · fresh {c.n_fresh}/{c.n}"
                 + "".join(f" · {x}" for x in extra if x))

    def probe_ignore_eos(self, sync: httpx.Client) -> None:
        """A server that rejects ignore_eos (a non-llama extension) gets requests without it, flagged."""
        body = request_body(self.s.endpoint, self.model, "ping", 1, temperature=self.s.temperature,
                            cache_prompt=None, ignore_eos=True)
        body["stream"] = False
        body.pop("stream_options", None)
        try:
            r = sync.post(f"{self.base_url}{PATHS[self.s.endpoint]}", json=body, timeout=self.s.timeout_s)
        except httpx.HTTPError:
            return
        if r.status_code in (400, 422) and "ignore_eos" in r.text:
            self.ignore_eos = False

    async def run(self, sync: httpx.Client, tokenizer: Tokenizer, has_metrics: bool) -> None:
        builder = PromptBuilder(tokenizer)
        self.sender = _CellSender(self.endpoint, _send_settings(self.s), tokenizer, llama=self.llama,
                                  ignore_eos=self.ignore_eos, cache_prompt=self.s.cache_prompt)
        # Streams go out through the load generator's WireClient; httpx only asks /health and /metrics.
        timeout = httpx.Timeout(self.s.timeout_s, connect=min(self.s.timeout_s, 10.0))
        async with httpx.AsyncClient(timeout=timeout) as client, \
                WireClient(self.base_url, connect_timeout_s=min(self.s.timeout_s, 10.0)) as wire, \
                ServerCheck(self.endpoint, client, self.s.stall_floor_s, server_pids=local_pids(self.endpoint),
                            stopped=lambda: bool(self.stopped)) as check:
            self.check = self.sender.server_check = check
            for mark in self.s.context_marks:
                for conc in self.s.concurrency:
                    if self.stopped:
                        return
                    await self.cell(client, wire, sync, builder, mark, conc, has_metrics)


def _count(s: BenchSettings) -> str:
    aside = f"contended or stalled ones set aside and replaced, up to {s.sample_budget:g}× in all"
    if s.interval_target_pct is None or s.max_samples <= s.samples:
        return f"{s.samples} samples ({aside})"
    return (f"{s.samples}–{s.max_samples} samples (until ±{s.interval_target_pct:g}% on {s.interval_metric}, "
            f"at most {s.max_cell_s:g} s a cell; {aside})")


def _f(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def _roofline(s: BenchSettings, props: dict[str, Any], cells: list[Cell], say: Callable[[str], None]
              ) -> tuple[Roofline | None, str | None]:
    path = s.model_path or props.get("model_path")
    if not path or not Path(str(path)).is_file():
        return None, "model file not known or not on this machine (pass model_path)"
    candidates = sorted((c for c in cells if c.concurrency == 1), key=lambda c: c.context_tokens)
    decode, source = None, None
    for c in candidates:
        for name in ("decode_tok_s_server", "decode_tok_s_client"):
            stat = getattr(c, name)
            if stat.median is not None and decode is None:
                decode, source = stat.median, f"{name} median, ctx {c.context_tokens}, concurrency 1"
    bw, bw_source = s.memory_bandwidth_gbs, s.bandwidth_source or "given"
    if bw is None:
        say("memory bandwidth probe (1 s)")
        bw, bw_source = probe_bandwidth_gbs(), "built-in probe: single-thread memcpy, read + write bytes"
    try:
        return roofline(Path(str(path)), bw, bw_source, decode, source), None
    except ServepackError as exc:
        return None, str(exc)


def _host_summary(watch: ContentionWatch | None, measured: list[RequestSample], t0_unix: float
                  ) -> ContentionSummary | None:
    if watch is None:
        return None
    watch.phase("bench", t0_unix)
    return watch.summary([s.host for s in measured if s.host is not None])


def run_bench(
    endpoint: Endpoint, settings: BenchSettings, results: ResultsDir | None, *,
    sampler: MemorySampler | None = None, progress: Callable[[str], None] | None = None,
    watch: ContentionWatch | None = None, energy: EnergyMeter | None = None,
    llama_bench: LlamaBenchResult | None = None,
) -> BenchSummary:
    """Measure every (mark, concurrency) cell; write requests.jsonl as it goes and server_bench.json at the end.

    With a `watch`, every measured request carries the host's contention over its window (`contended`). Each
    cell's joules come from `energy` (by default every meter this host has: NVML GPUs, RAPL). The llama-bench
    result to pair with is `llama_bench`, else `settings.llama_bench_json` read (`llama_bench.read_result`) before
    the first request: nothing the user named is opened after the measurements.
    """
    if llama_bench is None and settings.llama_bench_json:
        llama_bench = read_result(Path(settings.llama_bench_json), f"--llama-bench-json {settings.llama_bench_json}")
    say = progress or quiet
    started, t0, t0_unix = utc_now(), time.monotonic(), time.time()
    run = _Run(endpoint, settings, results, sampler, say, watch)
    died: ServerDied | None = None
    with httpx.Client(timeout=30.0) as sync:
        run.llama, facts, props = probe_server(sync, run.base_url, settings.endpoint)
        tokenizer: Tokenizer = ServerTokenizer(sync, run.base_url, settings.endpoint) \
            if facts["prompt.exact_tokens"].state == "known" else EstimateTokenizer()
        say(f"bench {run.base_url} ({'llama-server' if run.llama else 'OpenAI-compatible'}): marks "
            f"{list(settings.context_marks)} × concurrency {list(settings.concurrency)}, {_count(settings)}, "
            f"gen {settings.gen_tokens}")
        if not run.llama:
            run.probe_ignore_eos(sync)
        # The meters start inside the try whose finally stops them: a failure starting the second stops the first.
        meter: CpuMeter | None = None
        try:
            run.energy_meter = energy or EnergyMeter().start()
            meter = CpuMeter(local_pids(endpoint)).start()
            asyncio.run(run.run(sync, tokenizer, facts["server.metrics"].state == "known"))
        except ServerDied as exc:
            died, run.stopped = exc, "server died"
        finally:
            cost = meter.stop() if meter is not None else None
            if energy is None and run.energy_meter is not None:
                run.energy_meter.stop()
            if run.writer is not None:
                run.writer.close()
    roof, roof_why = _roofline(settings, props, run.cells, say) if died is None else (None, "server died")
    ratio = None
    if llama_bench is not None:
        ratio = shape_ratios(llama_bench, [(c.context_tokens, c.gen_tokens, c.prompt_eval_tok_s_server.median,
                                            c.decode_tok_s_server.median) for c in run.cells if c.concurrency == 1])
    measured = run.samples
    facts["output.exact_length"] = Fact(state="known", value="ignore_eos + max_tokens") if run.ignore_eos else \
        Fact(state="unavailable", reason="server refused ignore_eos; output length is the model's choice")
    summary = BenchSummary(
        status="partial" if run.stopped else "complete", stopped_reason=run.stopped,
        started_at=rfc3339(started), ended_at=rfc3339(utc_now()), wall_s=round(time.monotonic() - t0, 3),
        base_url=run.base_url, model=endpoint.model, mode="launch" if endpoint.launched else "attach",
        server_kind="llama-server" if run.llama else "openai-compatible", settings=settings, cells=run.cells,
        all_fresh=all_fresh(measured),
        prompt_token_report=prompt_token_report(measured), facts=facts, roofline=roof,
        roofline_unavailable=roof_why, llama_bench_ratio=ratio,
        memory=sampler.summary() if sampler else None, guard_event=sampler.tripped if sampler else None,
        host=_host_summary(watch, measured, t0_unix), observer=cost, energy=run.energy,
    )
    if results is not None:
        results.write_json(SUMMARY_NAME, summary)
    if died is not None:
        raise died
    return summary
