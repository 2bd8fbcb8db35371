"""What limited a capacity point, named from the figures measured during it (pure).

The verdict is one of: accelerator compute, memory bandwidth, GPU busy, server host thread, host CPU, client, SLO;
`none` only when a point met every SLO with nothing measured at its limit (or the sweep ended before anything did).
A verdict names a resource only with a figure that shows it: memory bandwidth with the bandwidth achieved against
the device's peak; NVML's utilisation counters say only how long a kernel ran or memory was touched, so alone they
give "GPU busy", never compute or bandwidth.
Rules, in order, first match wins; each threshold is a named constant below with the reason for its value:

1. **client**: the load generator fell behind its own schedule (launch lag p99 over its bound): the point measured
   the client, so nothing it shows is the server's limit.
2. **memory bandwidth**: decode read the weights at ≥ `MEM_BW_SHARE` of the device's peak bandwidth (achieved
   GB/s = the model's weight bytes read per decode step × steps a second, each stream getting one token a step;
   for an MoE whose header gives expert_count and expert_used_count, a step reads the shared tensors and the
   experts its streams' tokens use, `bench.roofline.WeightBytes`; without those counts every expert is counted and
   the figure says it is an upper bound).
3. **GPU busy**: NVML SM busy ≥ `GPU_BUSY_PCT` or memory busy ≥ `MEM_BW_BUSY_PCT`, with no bandwidth figure at
   its limit: the device had no idle time, and nothing measured says whether compute or memory was spent.
4. **server host thread**: the server's busiest thread ≥ `THREAD_BUSY_PCT` of one core while the GPU is mostly
   idle (SM < `GPU_IDLE_PCT`), or, with no GPU in use (none, or SM < `GPU_UNUSED_PCT`), while the server's other
   threads together use under `OTHER_THREADS_IDLE_CORES` (a single-threaded loop, not a pool of compute threads).
5. **host CPU**: the host's cores busy ≥ `HOST_BUSY_PCT`, or steal ≥ `STEAL_PCT`, while the server was short of
   CPU (it asked for ≥ `SERVER_DEMAND_CORES` and waited for a core ≥ `SERVER_STARVED_SHARE` of that; with the
   server's threads unseen, a full host is reported among the figures but not blamed). With no GPU and the
   server's own threads doing at least `SERVER_SHARE` of the busy time, the CPU is the accelerator: accelerator
   compute.
6. **accelerator compute (inferred)**: per-stream decode fell under `DECODE_SHARED` of the reference (the lowest
   load measured) while more streams ran: they share the compute. Not when a GPU meter shows the device under
   `GPU_IDLE_PCT` (then nothing measured says compute); with a GPU in use it is "GPU busy" (the streams share the
   device; no figure says which part of it).
7. **SLO**: the point missed an SLO with no resource above at its limit (e.g. requests queued at the slots).
8. **none**: every SLO met, nothing at its limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from pydantic import Field

from servepack.bench.observer import PointEvidence
from servepack.bench.roofline import WeightBytes
from servepack.strict import Strict

LimitKind = Literal["accelerator_compute", "memory_bandwidth", "gpu_busy", "server_host_thread", "host_cpu",
                    "client", "slo", "none"]
LIMIT_NAMES: Final[dict[str, str]] = {
    "accelerator_compute": "accelerator compute", "memory_bandwidth": "memory bandwidth", "gpu_busy": "GPU busy",
    "server_host_thread": "server host thread", "host_cpu": "host CPU", "client": "client", "slo": "SLO",
    "none": "none",
}

# NVML utilization.memory is the share of time device memory was being read or written. Decode streams every
# weight once per token, so a bandwidth-bound decode keeps it busy most of the time; from 70% on, memory traffic,
# not arithmetic, is what more streams wait for (checked before SM: a bandwidth-bound kernel also shows SM busy).
MEM_BW_BUSY_PCT: Final = 70.0
# Decode reading its weights at 60% of the device's published peak is as close as kernels get in practice (the
# rest goes to KV-cache reads, activations and launch gaps): from there more streams wait on memory.
MEM_BW_SHARE: Final = 0.6
# NVML utilization.gpu is the share of time any kernel ran. At 85% the device is idle less than one interval in
# seven: there is no idle time left for more streams to use.
GPU_BUSY_PCT: Final = 85.0
# Below 50% the accelerator is idle at least half the time: whatever limits the point, it is not the GPU.
GPU_IDLE_PCT: Final = 50.0
# Under 2% through a loaded point the server is not running on the GPU at all (llama.cpp on the CPU of a GPU
# host): the CPU rules apply, as on a host without one.
GPU_UNUSED_PCT: Final = 2.0
# One thread can use one core. /proc counts in 10 ms ticks and a loop that waits on I/O now and then never shows
# 100%; at 90% of a core a thread has no room left to go faster. Counted as running plus runnable-but-waiting
# (schedstat), so a thread that never sleeps on a busy host is still seen asking for the whole core.
THREAD_BUSY_PCT: Final = 90.0
# With no GPU, a pegged thread is the server's host loop only when it works alone: llama.cpp on a CPU runs a pool
# of compute threads (each near a core); under half a core for all the others together means no such pool.
OTHER_THREADS_IDLE_CORES: Final = 0.5
# The host's cores busy 90% of the time (/proc/stat): the scheduler has no idle core left for the server's or the
# client's next piece of work.
HOST_BUSY_PCT: Final = 90.0
# Steal: time the hypervisor gave this VM's cores to someone else; the same bound host.contention uses (10%).
STEAL_PCT: Final = 10.0
# A busy CPU host with no GPU is the server computing when its own threads did at least 3/4 of the busy time.
SERVER_SHARE: Final = 0.75
# A full host limits the server only if the server needs CPU and did not get it: it asked for at least half a core
# (its threads running plus waiting for one) and spent at least a quarter of that waiting. A server that sleeps on
# its GPU or its timers barely notices a busy host (the fake's scripted decode waited 0.04-0.17 core at load 5.7 on
# 2 cores while asking for 0.2): a full host beside it is not its limit.
SERVER_DEMAND_CORES: Final = 0.5
SERVER_STARVED_SHARE: Final = 0.25
# Per-stream decode at 80% of the reference or more "held" (the noise of a shared host); below it, streams share.
DECODE_SHARED: Final = 0.8


@dataclass(frozen=True)
class PointFigures:
    """What the verdict reads from one point (a PointStats and the sweep's facts, flattened)."""

    level: float
    passed: bool
    slo_misses: list[str] = field(default_factory=list)  # "ttft p90 5,000 ms > 2,000 ms", one per missed SLO
    client_limited: bool | None = None
    launch_lag_p99_ms: float | None = None
    client_lag_bound_ms: float | None = None
    client_reason: str | None = None  # the load generator's own account (lag over its bound, arrivals dropped)
    decode_per_stream: float | None = None
    decode_reference: float | None = None  # per-stream decode at the lowest load measured
    reference_level: float | None = None
    mean_concurrency: float | None = None
    slots: int | None = None
    evidence: PointEvidence | None = None
    weight_bytes_per_token: int | None = None  # weight bytes a decode step reads (bench.roofline.bytes_per_token)
    weight_bytes: WeightBytes | None = None  # the same split shared / routed experts: an MoE step's bytes by streams
    peak_gbs: float | None = None  # the device's published memory bandwidth
    peak_source: str | None = None


class Limit(Strict):
    """The verdict: one kind, the sentence that says why, and the figures it was taken from."""

    kind: LimitKind
    reason: str = Field(description="the verdict in words, with the figures")
    level: float | None = Field(None, description="the point the verdict was taken at")
    rule: str | None = Field(None, description="the rule that decided, with its threshold")
    gpu_sm_pct: float | None = None
    gpu_mem_bw_pct: float | None = None
    server_thread_pct: float | None = Field(None, description="the server's busiest thread, % of one core")
    server_thread_wait_pct: float | None = Field(None, description="that thread waiting for a core, %")
    server_other_cores: float | None = Field(None, description="the server's other threads together, cores")
    server_wait_cores: float | None = Field(None, description="the server's threads waiting for a core, cores")
    host_cpu_pct: float | None = None
    host_steal_pct: float | None = None
    launch_lag_p99_ms: float | None = None
    client_lag_bound_ms: float | None = None
    decode_share: float | None = Field(None, description="per-stream decode ÷ the reference's (lowest load)")
    mean_concurrency: float | None = None
    slots: int | None = None
    achieved_gbs: float | None = Field(None, description="weight bytes read per decode step × steps a second")
    peak_gbs: float | None = Field(None, description="the device's published peak memory bandwidth")
    absent: list[str] = Field(default_factory=list, description="meters absent or unreadable at this point")

    @property
    def name(self) -> str:
        return LIMIT_NAMES[self.kind]


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{v:.0f}%"


def _absent(ev: PointEvidence | None) -> list[str]:
    if ev is None:
        return ["no readings taken during the point"]
    out = []
    for what, value, note in (("GPU", ev.gpu_sm_pct, ev.gpu_note), ("server threads", ev.server_thread_pct,
                                                                    ev.server_note),
                              ("host CPU", ev.host_cpu_pct, ev.host_note)):
        if value is None:
            out.append(f"{what}: {note or 'not measured'}")
    return out


def _seen(ev: PointEvidence | None) -> str:
    """What the meters read, in a few words, for a verdict that names no resource."""
    if ev is None:
        return "no meter read during the point"
    bits = []
    if ev.gpu_sm_pct is not None:
        bits.append(f"GPU SM {_pct(ev.gpu_sm_pct)}, memory {_pct(ev.gpu_mem_bw_pct)}")
    if ev.server_thread_pct is not None:
        bits.append(f"busiest server thread {_pct(ev.server_thread_pct)} of a core")
    if ev.host_cpu_pct is not None:
        bits.append(f"host CPU {_pct(ev.host_cpu_pct)}")
    return ", ".join(bits) or "no meter could be read"


def classify_point(f: PointFigures) -> Limit:
    """The one thing that limited this point (see the module doc for the rules, in order)."""
    ev = f.evidence
    share = (f.decode_per_stream / f.decode_reference
             if f.decode_per_stream is not None and f.decode_reference else None)
    per_step = _bytes_per_step(f)
    achieved = per_step * f.decode_per_stream / 1e9 if per_step and f.decode_per_stream is not None else None
    base = Limit(kind="none", reason="", level=f.level, launch_lag_p99_ms=f.launch_lag_p99_ms,
                 achieved_gbs=None if achieved is None else round(achieved, 2), peak_gbs=f.peak_gbs,
                 client_lag_bound_ms=f.client_lag_bound_ms, decode_share=None if share is None else round(share, 4),
                 mean_concurrency=f.mean_concurrency, slots=f.slots, absent=_absent(ev))
    if ev is not None:
        other = ev.server_other_cores
        base = base.model_copy(update={
            "gpu_sm_pct": ev.gpu_sm_pct, "gpu_mem_bw_pct": ev.gpu_mem_bw_pct, "server_thread_pct": ev.server_thread_pct,
            "server_thread_wait_pct": ev.server_thread_wait_pct, "server_wait_cores": ev.server_wait_cores,
            "server_other_cores": None if other is None else round(other, 3), "host_cpu_pct": ev.host_cpu_pct,
            "host_steal_pct": ev.host_steal_pct})
    at = f"at {f.level:g}"

    def verdict(kind: LimitKind, rule: str, reason: str) -> Limit:
        return base.model_copy(update={"kind": kind, "rule": rule, "reason": f"{at}: {reason}"})

    if f.client_limited:
        lag = (f"launch lag p99 {f.launch_lag_p99_ms:,.1f} ms over the {f.client_lag_bound_ms:g} ms bound"
               if f.launch_lag_p99_ms is not None and f.client_lag_bound_ms is not None else "launch lag over bound")
        why = f.client_reason or (f"the load generator fell behind its schedule ({lag}): this point measured the "
                                  "client, not the server")
        return verdict("client", "launch lag p99 > its bound, or arrivals dropped at the client", why)
    resource = _resource(f, ev, share, achieved)
    if resource is not None:
        return verdict(*resource)
    if not f.passed:
        misses = "; ".join(f.slo_misses) or "an SLO missed"
        queued = ""
        if (f.slots is not None and f.mean_concurrency is not None and f.mean_concurrency > f.slots
                and share is not None and share >= DECODE_SHARED):
            queued = (f"; about {f.mean_concurrency:.1f} requests were in flight for {f.slots} "
                      f"slot{'s' if f.slots != 1 else ''}: the rest waited in the server's queue while per-stream "
                      f"decode held at {share:.0%} of the reference's")
        return verdict("slo", "an SLO missed with no resource at its limit",
                       f"{misses}, with nothing measured at its limit ({_seen(ev)}){queued}")
    return verdict("none", "every SLO met, nothing at its limit",
                   f"every SLO met with nothing measured at its limit ({_seen(ev)})")


def _streams(f: PointFigures) -> float:
    """Tokens in one decode step: the streams in flight (the level when unmeasured), at most one a slot."""
    streams = f.mean_concurrency if f.mean_concurrency is not None else f.level
    return max(1.0, min(streams, f.slots) if f.slots else streams)


def _bytes_per_step(f: PointFigures) -> int | None:
    """The weight bytes one decode step reads: an MoE's by the experts its tokens use (`WeightBytes`)."""
    if f.weight_bytes is not None:
        return f.weight_bytes.per_step(_streams(f))
    return f.weight_bytes_per_token or None


def _bandwidth(f: PointFigures, achieved: float | None) -> str:
    """The bandwidth figure in words, or why there is none."""
    if achieved is None:
        return "no bandwidth figure (the model's weight bytes per step unknown)"
    counted = f.weight_bytes.describe(_streams(f)) if f.weight_bytes is not None else ""
    fig = f"decode read its weights at {achieved:,.0f} GB/s ({_bytes_per_step(f) or 0:,} bytes a step × " \
          f"{f.decode_per_stream or 0:,.1f} steps/s{'; ' + counted if counted else ''})"
    if f.peak_gbs:
        fig += f", {achieved / f.peak_gbs:.0%} of the device's {f.peak_gbs:,.0f} GB/s peak" + \
            (f" ({f.peak_source})" if f.peak_source else "")
    else:
        fig += ", the device's peak unknown"
    return fig


def _resource(f: PointFigures, ev: PointEvidence | None, share: float | None,
              achieved: float | None) -> tuple[LimitKind, str, str] | None:
    """Rules 2-6: the resource at its limit, or None."""
    sm = ev.gpu_sm_pct if ev else None
    membw = ev.gpu_mem_bw_pct if ev else None
    thread = ev.server_thread_runnable_pct if ev else None
    other = ev.server_other_cores if ev else None
    if achieved is not None and f.peak_gbs and achieved >= MEM_BW_SHARE * f.peak_gbs:
        return ("memory_bandwidth", f"achieved bandwidth ≥ {MEM_BW_SHARE:.0%} of the device's peak",
                f"{_bandwidth(f, achieved)} (≥ {MEM_BW_SHARE:.0%}): decode waits on memory bandwidth")
    if (sm is not None and sm >= GPU_BUSY_PCT) or (membw is not None and membw >= MEM_BW_BUSY_PCT):
        return ("gpu_busy", f"NVML SM ≥ {GPU_BUSY_PCT:g}% or memory ≥ {MEM_BW_BUSY_PCT:g}%, no bandwidth at its limit",
                f"NVML shows SM {_pct(sm)}, memory {_pct(membw)} busy (the time a kernel ran or memory was "
                f"touched, not the compute or bandwidth used); {_bandwidth(f, achieved)}: the GPU had no idle time, "
                "and no figure shows compute")
    assert ev is not None or thread is None
    who = f" ({ev.server_thread})" if ev is not None and ev.server_thread else ""
    ran = f"ran at {_pct(ev.server_thread_pct if ev else None)} of one core"
    if ev is not None and ev.server_thread_wait_pct:
        ran += f" and waited for a core {_pct(ev.server_thread_wait_pct)} more (runnable {_pct(thread)})"
    no_gpu = ev is not None and (ev.gpu_state == "absent" or (sm is not None and sm < GPU_UNUSED_PCT))
    if thread is not None and thread >= THREAD_BUSY_PCT:
        if sm is not None and GPU_UNUSED_PCT <= sm < GPU_IDLE_PCT:
            return ("server_host_thread", f"busiest server thread ≥ {THREAD_BUSY_PCT:g}% of a core while GPU SM "
                                          f"< {GPU_IDLE_PCT:g}%",
                    f"the server's busiest thread{who} {ran} while GPU SM utilisation "
                    f"was {_pct(sm)} (< {GPU_IDLE_PCT:g}%): the server's host loop, not the GPU, set the pace")
        if no_gpu and other is not None and other < OTHER_THREADS_IDLE_CORES:
            return ("server_host_thread", f"busiest server thread ≥ {THREAD_BUSY_PCT:g}% of a core, the others "
                                          f"< {OTHER_THREADS_IDLE_CORES:g} core",
                    f"the server's busiest thread{who} {ran} while its other threads "
                    f"used {other:.2f} cores together: one thread did the serving and had no room left")
    busy = ev.host_cpu_pct if ev else None
    steal = ev.host_steal_pct if ev else None
    if (busy is not None and busy >= HOST_BUSY_PCT) or (steal is not None and steal >= STEAL_PCT):
        assert ev is not None
        figures = f"host CPU {_pct(busy)} busy, steal {_pct(steal)}"
        server = ev.server_cpu_cores
        host_cores = (busy or 0.0) / 100 * (ev.host_cores or 0)
        if (no_gpu and server is not None and host_cores > 0
                and server >= SERVER_SHARE * host_cores and (steal or 0.0) < STEAL_PCT):
            return ("accelerator_compute", f"no GPU; host ≥ {HOST_BUSY_PCT:g}% busy, the server ≥ "
                                           f"{SERVER_SHARE:.0%} of it",
                    f"{figures}, {server:.2f} of those {host_cores:.2f} cores the server's own threads: it computes "
                    "on the CPU, and the CPU is full")
        wait = ev.server_wait_cores
        demand = None if server is None else server + (wait or 0.0)
        starved = (server is not None and demand is not None and demand >= SERVER_DEMAND_CORES
                   and (wait is None or wait >= SERVER_STARVED_SHARE * demand))
        if starved:
            assert server is not None
            want = (f"the server's threads ran {server:.2f} cores"
                    + (f" and waited for one {wait:.2f} more" if wait is not None else ""))
            return ("host_cpu", f"host CPU ≥ {HOST_BUSY_PCT:g}% busy or steal ≥ {STEAL_PCT:g}%, the server "
                                f"short of CPU",
                    f"{figures} (bounds {HOST_BUSY_PCT:g}% and {STEAL_PCT:g}%), {want}: the host had no CPU to "
                    "spare for the server")
    if share is not None and share < DECODE_SHARED and f.reference_level is not None \
            and f.level > f.reference_level and (sm is None or no_gpu or sm >= GPU_IDLE_PCT):
        meter = (f"GPU SM {_pct(sm)}" if sm is not None else
                 f"no GPU meter ({ev.gpu_note})" if ev is not None and ev.gpu_note else "no GPU meter")
        if ev is not None and ev.host_cpu_pct is not None:
            meter += f", host CPU {_pct(ev.host_cpu_pct)}"
        if sm is not None and not no_gpu:
            return ("gpu_busy", f"per-stream decode < {DECODE_SHARED:.0%} of the reference's, on a GPU",
                    f"per-stream decode fell to {share:.0%} of its value at {f.reference_level:g} "
                    f"({f.decode_per_stream:,.1f} of {f.decode_reference:,.1f} tok/s) with the GPU in use "
                    f"({meter}; {_bandwidth(f, achieved)}): the streams share the GPU, and no figure shows compute")
        return ("accelerator_compute", f"per-stream decode < {DECODE_SHARED:.0%} of the reference's",
                f"per-stream decode fell to {share:.0%} of its value at {f.reference_level:g} "
                f"({f.decode_per_stream:,.1f} of {f.decode_reference:,.1f} tok/s) with no host thread or host CPU "
                f"at its limit ({meter}): the streams share the compute")
    return None
