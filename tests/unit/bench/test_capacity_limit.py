"""The limit verdict and the knee, from the figures measured during each point (pure).

Each rule is checked with the answer it must give and the wrong answer it must not; the H200 case that started
issue 22 (GPU SM 14%, the server's main thread at 93% of a core) must never be called compute.
"""

from __future__ import annotations

from typing import Any

import pytest

from servepack.bench.capacity import PointStats, Throughput, classify_limit, find_knee, parse_slo, point_limit
from servepack.bench.limit import (
    GPU_BUSY_PCT,
    GPU_IDLE_PCT,
    HOST_BUSY_PCT,
    MEM_BW_BUSY_PCT,
    THREAD_BUSY_PCT,
    PointFigures,
    classify_point,
)
from servepack.bench.observer import GpuUse, PointEvidence

TTFT = parse_slo("ttft_p90=2s")


def _gpu(sm: float, mem: float, **kw: Any) -> PointEvidence:
    return PointEvidence(window_s=300.0, samples=300, gpu_state="measured", gpus=[GpuUse(index=0, sm_pct=sm,
                                                                                         mem_bw_pct=mem)],
                         gpu_sm_pct=sm, gpu_mem_bw_pct=mem, **kw)


def _cpu_only(**kw: Any) -> PointEvidence:
    return PointEvidence(window_s=2.0, samples=4, gpu_state="absent", gpu_note="NVML unavailable: no library", **kw)


def _fig(ev: PointEvidence | None, *, level: float = 256, passed: bool = False, share: float = 1.0,
         **kw: Any) -> PointFigures:
    misses = [] if passed else ["ttft p90 3,992 ms > 2,000 ms"]
    base: dict[str, Any] = dict(level=level, passed=passed, slo_misses=misses, decode_per_stream=50.0 * share,
                                decode_reference=50.0, reference_level=1,
                                mean_concurrency=level, slots=256, evidence=ev)
    return PointFigures(**{**base, **kw})


# -- the H200 case -----------------------------------------------------------------------------------------------

H200 = _gpu(13.8, 9.0, server_thread_pct=93.0, server_thread="llama-server (pid 7, tid 7)", server_threads=40,
            server_cpu_cores=1.1, host_cpu_pct=8.0, host_steal_pct=0.0, host_cores=16)


def test_a_pegged_server_thread_with_an_idle_gpu_is_the_host_thread_not_compute() -> None:
    # per-stream decode fell to 4% of one stream's: the old rule called this "compute"
    lim = classify_point(_fig(H200, share=0.04))
    assert lim.kind == "server_host_thread", lim.reason
    assert lim.kind != "accelerator_compute"
    assert (lim.gpu_sm_pct, lim.server_thread_pct, lim.level) == (13.8, 93.0, 256)
    assert "93% of one core" in lim.reason and "14%" in lim.reason and "llama-server (pid 7, tid 7)" in lim.reason
    assert lim.rule is not None and f"{THREAD_BUSY_PCT:g}%" in lim.rule and f"{GPU_IDLE_PCT:g}%" in lim.rule
    assert lim.absent == []


def test_thresholds_are_edges_both_ways() -> None:
    below = H200.model_copy(update={"server_thread_pct": THREAD_BUSY_PCT - 0.1})
    assert classify_point(_fig(below, share=1.0)).kind == "slo"  # nothing at its limit: the SLO binds
    at = H200.model_copy(update={"server_thread_pct": THREAD_BUSY_PCT})
    assert classify_point(_fig(at)).kind == "server_host_thread"
    # a GPU just busy enough is busy (never compute from NVML alone); just under it is not (by the GPU rule)
    assert classify_point(_fig(_gpu(GPU_BUSY_PCT, 10.0))).kind == "gpu_busy"
    assert classify_point(_fig(_gpu(GPU_BUSY_PCT - 0.1, 10.0))).kind == "slo"
    # a thread pegged while the GPU is half busy is not called the host thread's fault
    half = H200.model_copy(update={"gpu_sm_pct": GPU_IDLE_PCT})
    assert classify_point(_fig(half)).kind != "server_host_thread"


# -- the GPU rules -----------------------------------------------------------------------------------------------


def test_nvml_sm_alone_is_gpu_busy_never_compute_even_with_a_busy_host_thread() -> None:
    lim = classify_point(_fig(_gpu(96.0, 40.0, server_thread_pct=97.0, server_cpu_cores=1.0)))
    assert lim.kind == "gpu_busy" and lim.name == "GPU busy" and lim.kind != "accelerator_compute"
    assert "SM 96%" in lim.reason and "no figure shows compute" in lim.reason and lim.gpu_sm_pct == 96.0
    assert "no bandwidth figure" in lim.reason


def test_memory_bandwidth_needs_the_bandwidth_achieved_against_the_peak() -> None:
    # 19.85 GB of weights a step (a 32B Q4_K_M) at 120 steps/s on an H100 (3,350 GB/s): 2,382 GB/s, 71% of peak
    big = dict(weight_bytes_per_token=19_850_000_000, peak_gbs=3350.0, peak_source="published peak of H100")
    lim = classify_point(_fig(_gpu(99.0, 40.0), share=2.4, **big))
    assert lim.kind == "memory_bandwidth", lim.reason
    assert lim.achieved_gbs == pytest.approx(2382.0) and lim.peak_gbs == 3350.0
    assert "2,382 GB/s" in lim.reason and "71% of the device's 3,350 GB/s peak" in lim.reason
    # the same decode on a device twice as fast is not at its bandwidth: NVML says busy, and that is all it says
    fast = classify_point(_fig(_gpu(99.0, 40.0), share=2.4, **{**big, "peak_gbs": 8000.0}))
    assert fast.kind == "gpu_busy" and "30% of the device's 8,000 GB/s peak" in fast.reason
    # NVML's memory counter alone never names bandwidth
    mem = classify_point(_fig(_gpu(60.0, MEM_BW_BUSY_PCT + 8)))
    assert mem.kind == "gpu_busy" and mem.kind != "memory_bandwidth" and mem.gpu_mem_bw_pct == MEM_BW_BUSY_PCT + 8
    assert classify_point(_fig(_gpu(60.0, MEM_BW_BUSY_PCT - 1))).kind == "slo"


def test_shared_decode_on_a_busy_gpu_is_gpu_busy_not_compute() -> None:
    lim = classify_point(_fig(_gpu(70.0, 10.0), share=0.5))
    assert lim.kind == "gpu_busy" and "the streams share the GPU" in lim.reason


def test_an_idle_gpu_is_never_compute_by_decode_sharing() -> None:
    # per-stream decode fell by half, but the GPU was 20% busy and nothing else at its limit: the SLO binds
    lim = classify_point(_fig(_gpu(20.0, 10.0, server_thread_pct=40.0), share=0.5))
    assert lim.kind == "slo" and "GPU SM 20%" in lim.reason


# -- no GPU: the CPU box -----------------------------------------------------------------------------------------


def test_a_lone_pegged_thread_without_a_gpu_is_the_host_thread() -> None:
    ev = _cpu_only(server_thread_pct=99.0, server_cpu_cores=1.04, server_thread="fake (pid 9, tid 9)",
                   host_cpu_pct=70.0, host_steal_pct=0.0, host_cores=2)
    lim = classify_point(_fig(ev, level=4, share=0.25))
    assert lim.kind == "server_host_thread", lim.reason
    assert lim.server_other_cores == pytest.approx(0.05, abs=1e-3)
    assert any(a.startswith("GPU: NVML unavailable") for a in lim.absent)


def test_a_pool_of_busy_compute_threads_on_a_full_cpu_is_compute_not_the_host_thread() -> None:
    # llama.cpp on the CPU: two compute threads each near a core on a 2-core host
    ev = _cpu_only(server_thread_pct=99.0, server_cpu_cores=1.9, host_cpu_pct=98.0, host_steal_pct=0.0,
                   host_cores=2)
    lim = classify_point(_fig(ev, level=4, share=0.3))
    assert lim.kind == "accelerator_compute", lim.reason
    assert "computes on the CPU" in lim.reason


def test_a_full_host_that_starves_the_server_is_host_cpu() -> None:
    # the server asked for 0.7 core and waited for 0.3 of it: others held the cores
    ev = _cpu_only(server_thread_pct=30.0, server_cpu_cores=0.4, server_wait_cores=0.3,
                   host_cpu_pct=HOST_BUSY_PCT + 5, host_steal_pct=0.0, host_cores=2)
    lim = classify_point(_fig(ev, level=4, share=0.3))
    assert lim.kind == "host_cpu" and lim.host_cpu_pct == HOST_BUSY_PCT + 5 and lim.server_wait_cores == 0.3
    assert "waited for one 0.30 more" in lim.reason


def test_a_full_host_beside_a_server_that_barely_needs_cpu_is_not_host_cpu() -> None:
    # the fake's scripted shared decode on this 2-core box at load 5.7: host 100% busy, the server asking for 0.2
    # core. The host is not what held it back; its per-stream decode fell because the streams share the compute.
    ev = _cpu_only(server_thread_pct=3.0, server_cpu_cores=0.03, server_wait_cores=0.17, host_cpu_pct=100.0,
                   host_steal_pct=0.0, host_cores=2)
    lim = classify_point(_fig(ev, level=4, share=0.4))
    assert lim.kind == "accelerator_compute" and lim.kind != "host_cpu", lim.reason
    # and with decode held it is the SLO, still not the host
    assert classify_point(_fig(ev, level=4, share=0.95)).kind == "slo"


def test_a_full_host_is_not_blamed_when_the_servers_threads_are_unseen() -> None:
    # an attached server whose process is not visible: the host's figure is stated, not made the verdict
    ev = _cpu_only(host_cpu_pct=97.0, host_steal_pct=0.0, host_cores=2, server_note="not known on this host")
    lim = classify_point(_fig(ev, level=4, share=0.4))
    assert lim.kind == "accelerator_compute" and "host CPU 97%" in lim.reason, lim.reason
    assert classify_point(_fig(ev, level=4, share=1.0)).kind == "slo"
    assert "server threads: not known on this host" in lim.absent


def test_a_thread_that_never_sleeps_on_a_busy_host_is_still_pegged() -> None:
    # it ran 40% of a core and waited 55% more for one: it asked for the whole core
    ev = _cpu_only(server_thread_pct=40.0, server_thread_wait_pct=55.0, server_cpu_cores=0.41,
                   server_wait_cores=0.56, host_cpu_pct=100.0, host_steal_pct=0.0, host_cores=2)
    lim = classify_point(_fig(ev, level=2, share=0.5))
    assert lim.kind == "server_host_thread" and "runnable 95%" in lim.reason, lim.reason
    assert lim.server_thread_wait_pct == 55.0


def test_a_gpu_the_server_does_not_use_counts_as_none() -> None:
    # llama.cpp on the CPU of a GPU host: SM 0.4%, two compute threads filling the host's two cores
    ev = _gpu(0.4, 0.1, server_thread_pct=99.0, server_cpu_cores=1.95, host_cpu_pct=99.0, host_steal_pct=0.0,
              host_cores=2)
    lim = classify_point(_fig(ev, level=4, share=0.3))
    assert lim.kind == "accelerator_compute" and lim.kind != "server_host_thread", lim.reason


def test_steal_is_host_cpu_even_when_the_server_does_the_work() -> None:
    ev = _cpu_only(server_thread_pct=60.0, server_cpu_cores=1.5, host_cpu_pct=80.0, host_steal_pct=25.0,
                   host_cores=2)
    lim = classify_point(_fig(ev, level=4))
    assert lim.kind == "host_cpu" and "steal 25%" in lim.reason


def test_decode_sharing_without_a_meter_is_compute_and_says_it_was_inferred() -> None:
    ev = _cpu_only(server_thread_pct=20.0, server_cpu_cores=0.3, host_cpu_pct=30.0, host_steal_pct=0.0,
                   host_cores=2)
    lim = classify_point(_fig(ev, level=2, share=0.66))
    assert lim.kind == "accelerator_compute" and "66%" in lim.reason and "no GPU meter" in lim.reason
    assert lim.decode_share == pytest.approx(0.66)
    # held decode is not compute: the same figures at 90% of the reference leave the SLO
    assert classify_point(_fig(ev, level=2, share=0.9)).kind == "slo"
    # the reference itself (the lowest level) never shares with itself
    assert classify_point(_fig(ev, level=1, share=0.5)).kind == "slo"


def test_an_unreadable_gpu_does_not_pass_for_a_cpu_host() -> None:
    ev = PointEvidence(window_s=5.0, samples=5, gpu_state="unreadable",
                       gpu_note="unreadable during the point: NVMLError_GpuIsLost", server_thread_pct=99.0,
                       server_cpu_cores=1.0, host_cpu_pct=40.0, host_steal_pct=0.0, host_cores=16)
    lim = classify_point(_fig(ev, share=1.0))
    assert lim.kind == "slo", lim.reason  # a thread pegged, but whether the GPU idled is unknown: not proven
    assert "GPU: unreadable during the point: NVMLError_GpuIsLost" in lim.absent


# -- the client and the SLO --------------------------------------------------------------------------------------


def test_a_client_that_fell_behind_is_the_verdict_whatever_the_server_showed() -> None:
    lim = classify_point(_fig(_gpu(97.0, 20.0), client_limited=True, launch_lag_p99_ms=54.2,
                              client_lag_bound_ms=10.0))
    assert lim.kind == "client" and "54.2 ms" in lim.reason and "10 ms" in lim.reason
    assert (lim.launch_lag_p99_ms, lim.client_lag_bound_ms) == (54.2, 10.0)
    kept_up = classify_point(_fig(_gpu(97.0, 20.0), client_limited=False, launch_lag_p99_ms=1.0,
                                  client_lag_bound_ms=10.0))
    assert kept_up.kind == "gpu_busy"


def test_queueing_at_the_slots_is_the_slo_with_the_slots_named() -> None:
    ev = _cpu_only(server_thread_pct=10.0, server_cpu_cores=0.1, host_cpu_pct=20.0, host_steal_pct=0.0,
                   host_cores=2)
    lim = classify_point(_fig(ev, level=4, share=0.98, slots=3, mean_concurrency=3.9))
    assert lim.kind == "slo" and "3.9 requests were in flight for 3 slots" in lim.reason
    assert "ttft p90 3,992 ms > 2,000 ms" in lim.reason


def test_a_passing_point_with_headroom_is_none_and_no_readings_are_named_absent() -> None:
    lim = classify_point(_fig(None, level=1, passed=True))
    assert lim.kind == "none" and lim.absent == ["no readings taken during the point"]


# -- the knee and the sweep's verdict ------------------------------------------------------------------------------


def _point(level: float, *, passed: bool, decode: float = 50.0, ev: PointEvidence | None = None,
           client_limited: bool | None = False, lag: float | None = 2.0, stopped: str | None = None,
           ttft: float = 500.0) -> PointStats:
    return PointStats(
        index=0, level=level, shape="closed", n=10, n_ok=10, n_fresh=10, n_warm=0, n_dropped=0, wall_s=1.0,
        requests_s=10.0, goodput_rps=0.0, good_fraction=0.0, slo_values={TTFT.text: ttft},
        slo_met={TTFT.text: passed}, passed=passed,
        throughput=Throughput(decode_tok_s_per_stream=decode, decode_tok_s_concurrent=None, output_tok_s_wall=None),
        mean_concurrency=level, ttft_ms_p50=None, ttft_ms_p90=ttft, e2e_ms_p50=None, stopped=stopped,
        launch_lag_p99_ms=lag, client_limited=client_limited, client_lag_bound_ms=10.0, evidence=ev)


def _judged(points: list[PointStats]) -> list[PointStats]:
    done: list[PointStats] = []
    for p in points:
        p.limit = point_limit(p, done, [TTFT], slots=None)
        done.append(p)
    return done


def test_the_knee_is_the_largest_passing_point_with_a_client_that_kept_up() -> None:
    pts = [_point(1, passed=True), _point(2, passed=True), _point(4, passed=True, client_limited=True, lag=40.0),
           _point(8, passed=False, ttft=5000.0)]
    k = find_knee(pts, [TTFT])
    assert k.level == 2, k.reason
    assert k.level != 4  # it passed, but the client set its pace
    assert "launch lag p99 2.0 ms ≤ 10 ms" in k.reason
    assert find_knee([*pts[:2], _point(4, passed=True), *pts[3:]], [TTFT]).level == 4


def test_no_knee_when_nothing_passes_and_never_one_stream_by_default() -> None:
    k = find_knee([_point(1, passed=False, ttft=4100.0), _point(2, passed=False, ttft=5000.0)], [TTFT])
    assert k.level is None and k.level != 1
    assert "even the lowest measured, 1 streams, missed ttft p90 4,100.0 ms > 2000 ms" in k.reason


def test_no_knee_when_only_client_limited_points_pass() -> None:
    k = find_knee([_point(1, passed=True, client_limited=True, lag=33.0), _point(2, passed=False)], [TTFT])
    assert k.level is None and "client-limited" in k.reason and "1 (33.0 ms)" in k.reason


def test_a_stopped_point_is_never_the_knee() -> None:
    k = find_knee([_point(1, passed=True), _point(2, passed=True, stopped="interrupted (Ctrl-C)")], [TTFT])
    assert k.level == 1
    assert find_knee([_point(1, passed=True, stopped="server died")], [TTFT]).level is None


def test_the_sweeps_verdict_is_the_lowest_failing_points() -> None:
    busy = _gpu(97.0, 30.0, server_thread_pct=50.0)
    pts = _judged([_point(1, passed=True, ev=H200), _point(2, passed=False, ev=H200, ttft=3000.0),
                   _point(4, passed=False, ev=busy, ttft=9000.0)])
    lim = classify_limit(pts)
    assert lim.kind == "server_host_thread" and lim.level == 2, lim.reason
    assert lim.reason.startswith("the lowest load that missed an SLO, at 2:")
    assert [p.limit.kind for p in pts if p.limit] == ["server_host_thread", "server_host_thread", "gpu_busy"]


def test_a_client_limited_point_below_the_first_failure_is_the_verdict() -> None:
    # 4 passed its SLO only with a client that fell behind; 8 missed it with the GPU busy: capacity stops at 4,
    # and what stopped it is the client, not the GPU seen at 8
    pts = _judged([_point(1, passed=True, ev=_gpu(30.0, 10.0)),
                   _point(4, passed=True, ev=_gpu(60.0, 10.0), client_limited=True, lag=41.0),
                   _point(8, passed=False, ev=_gpu(97.0, 30.0), ttft=9000.0)])
    lim = classify_limit(pts)
    assert lim.kind == "client" and lim.level == 4, lim.reason
    assert lim.kind != "accelerator_compute"
    assert lim.reason.startswith("the lowest load that the client could not hold, at 4:")


def test_every_level_passing_names_the_top_points_limit_or_none() -> None:
    busy = _gpu(97.0, 30.0)
    pts = _judged([_point(1, passed=True, ev=_gpu(30.0, 10.0)), _point(2, passed=True, ev=busy)])
    lim = classify_limit(pts)
    assert lim.kind == "gpu_busy" and lim.level == 2 and lim.reason.startswith("every level met")
    idle = _judged([_point(1, passed=True, ev=_gpu(30.0, 10.0)), _point(2, passed=True, ev=_gpu(31.0, 10.0))])
    none = classify_limit(idle)
    assert none.kind == "none" and "raise --max-concurrency" in none.reason
    stopped = classify_limit(idle, stopped="memory guard min_available_ram_gb: 0.90 GiB available < 1 GiB")
    assert stopped.kind == "none" and "memory guard" in stopped.reason
    assert classify_limit([]).kind == "none"


def test_an_moe_step_reads_the_experts_its_streams_use_not_every_weight() -> None:
    from servepack.bench.roofline import WeightBytes

    # a 30B-A3B-like MoE: 1 GB shared, 16 GB in 128 routed experts, 8 a token; 150 steps/s on an H100
    moe = WeightBytes(shared=1_000_000_000, experts=16_000_000_000, expert_count=128, expert_used_count=8)
    h100 = dict(peak_gbs=3350.0, peak_source="published peak of H100")
    one = classify_point(_fig(_gpu(99.0, 40.0), level=1, share=3.0, mean_concurrency=1.0, weight_bytes=moe,
                              weight_bytes_per_token=2_000_000_000, **h100))
    # one token a step reads 1 GB + 16 GB × 8/128 = 2 GB: 300 GB/s, 9% of the peak: not bandwidth
    assert one.achieved_gbs == pytest.approx(300.0) and one.kind == "gpu_busy", one.reason
    assert "MoE: 8 of 128 experts a token, about 8.0 of 128 a step at 1 streams" in one.reason
    # the wrong answer: every weight byte read per step (17 GB × 150 = 2,550 GB/s, 76%) would say bandwidth
    dense_count = classify_point(_fig(_gpu(99.0, 40.0), level=1, share=3.0, mean_concurrency=1.0,
                                      weight_bytes_per_token=17_000_000_000, **h100))
    assert dense_count.kind == "memory_bandwidth" and dense_count.achieved_gbs == pytest.approx(2550.0)
    # 16 streams a step: the experts any of them uses (64.4%), not 8 of 128 as for one token
    many = classify_point(_fig(_gpu(99.0, 40.0), level=16, share=3.0, mean_concurrency=16.0, weight_bytes=moe,
                               weight_bytes_per_token=2_000_000_000, **h100))
    assert many.achieved_gbs == pytest.approx((1e9 + 16e9 * 0.64394) * 150 / 1e9, rel=1e-3)
    assert "1,695 GB/s" in many.reason and "51% of the device's 3,350 GB/s peak" in many.reason, many.reason
    assert many.kind == "gpu_busy" and "about 82.4 of 128 a step at 16 streams" in many.reason
    assert "routing taken as uniform" in many.reason
    # a dense model's figure does not move with the streams
    dense = WeightBytes(shared=19_407_413_248, experts=0)
    d = classify_point(_fig(_gpu(88.5, 21.5), level=16, share=15.9 / 50, mean_concurrency=16.0, weight_bytes=dense,
                            **h100))
    assert d.achieved_gbs == pytest.approx(308.58, abs=0.01) and "MoE" not in d.reason
