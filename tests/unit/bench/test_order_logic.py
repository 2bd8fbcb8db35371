"""bench.order (at rest, noise bands, repeats, the order verdict) and bench.carryover (settings that keep state)."""

from __future__ import annotations

import pytest

from servepack.bench.carryover import carry_over, carry_sentence, likely_carried
from servepack.bench.order import (
    MIN_CHANGE,
    Band,
    PointRest,
    compare_band,
    compare_repeat,
    judge,
    quantile_band,
    rest_line,
    wait_at_rest,
)
from servepack.engine.base import Endpoint, Rest


class _Scripted:
    """A rest check answering from a list (the last answer repeats)."""

    def __init__(self, answers: list[bool | None]) -> None:
        self.answers = answers
        self.calls = 0

    def rest(self) -> Rest:
        a = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return Rest(at_rest=a, source="/slots", reason="scripted")


def _wait(answers: list[bool | None], timeout_s: float = 10.0) -> tuple[PointRest, int]:
    check = _Scripted(answers)
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    got = wait_at_rest(Endpoint(base_url="http://127.0.0.1:1", model="m", rest_check=check), timeout_s=timeout_s,
                       poll_s=0.5, clock=lambda: now[0], sleep=sleep)
    return got, check.calls


def test_a_point_waits_until_the_server_is_at_rest_twice_in_a_row() -> None:
    got, calls = _wait([False, False, True, True])
    assert got.at_rest is True and calls == 4 and got.waited_s == pytest.approx(1.5) and got.source == "/slots"
    # one idle read between busy ones is not rest: the server was between two requests
    got, calls = _wait([True, False, True, True])
    assert got.at_rest is True and calls == 4


def test_a_server_still_busy_at_the_timeout_is_recorded_as_not_at_rest() -> None:
    got, _ = _wait([False], timeout_s=2.0)
    assert got.at_rest is False and got.waited_s >= 2.0 and "still busy after" in got.reason


def test_an_engine_that_cannot_tell_is_unknown_at_once() -> None:
    got, calls = _wait([None])
    assert got.at_rest is None and calls == 1 and got.waited_s == 0
    bare = wait_at_rest(Endpoint(base_url="http://127.0.0.1:1", model="m"))
    assert bare.at_rest is None and "no way to tell" in bare.reason


def test_quantile_band_holds_the_quantile_and_needs_enough_requests() -> None:
    values = [float(v) for v in range(1, 101)]
    low, high = quantile_band(values, 0.9) or (0, 0)
    assert low < 90 < high and high - low < 20
    assert quantile_band(values[:9], 0.5) is None


def _band(value: float, low: float, high: float) -> Band:
    return Band(figure="ttft p90", value=value, low=low, high=high, unit="ms")


def test_a_move_is_beyond_noise_only_when_the_intervals_part_and_the_change_is_large() -> None:
    assert compare_band(_band(100, 90, 110), _band(300, 280, 320)).beyond_noise
    overlap = compare_band(_band(100, 90, 130), _band(120, 110, 140))
    assert not overlap.beyond_noise and "overlap" in overlap.why
    # intervals apart but a 20% shift, or 4 ms: never called a dependence
    small = compare_band(_band(100, 99, 101), _band(120, 118, 122))
    assert not small.beyond_noise and MIN_CHANGE > 0.2
    jitter = compare_band(_band(10, 9.5, 10.5), _band(14, 13.5, 14.5))
    assert not jitter.beyond_noise and "under" in jitter.why
    none = compare_band(Band(figure="x", value=1, low=None, high=None, unit="ms"), _band(3, 2, 4))
    assert not none.beyond_noise and "no interval" in none.why


def test_the_verdict_is_order_dependent_when_a_repeat_moved_and_says_what_carried() -> None:
    moved = compare_repeat(64, "first point", (0, True, [_band(720, 650, 800)]),
                           (9, True, [_band(4960, 4500, 5300)]))
    v = judge([moved], "likely cache-ram 8192: ...", "streams")
    assert v.order_dependent is True and "no knee is claimed" in v.reason and "720.0 → 4,960.0" in v.reason
    lines = v.lines("streams")
    assert lines[0].startswith("capacity order: ORDER-DEPENDENT") and "BEYOND NOISE" in lines[1]
    assert "+589%" in lines[1] and "what carried over: likely cache-ram" in lines[-1]
    same = compare_repeat(64, "first point", (0, True, [_band(720, 650, 800)]), (9, True, [_band(730, 660, 810)]))
    ok = judge([same], "x", "streams")
    assert ok.order_dependent is False and "within noise" in ok.reason
    assert judge([], "x", "streams").order_dependent is None
    bare = Band(figure="ttft p90", value=720, low=None, high=None, unit="ms")
    unjudged = judge([compare_repeat(64, "first point", (0, True, [bare]), (9, True, [bare]))], "x", "streams")
    assert unjudged.order_dependent is None and "could not be judged" in unjudged.reason


def test_a_verdict_flip_within_noise_is_said_but_is_no_dependence() -> None:
    flip = compare_repeat(8, "knee", (3, True, [_band(95, 80, 110)]), (9, False, [_band(105, 90, 120)]))
    v = judge([flip], "x", "streams")
    assert v.order_dependent is False and "sits on the SLO's bound" in v.reason
    assert "PASS first, fail again" in v.lines("streams")[1]


def test_carry_over_reads_the_argv_and_names_llama_cpp_defaults() -> None:
    props = {"build_info": "b1", "total_slots": 4}
    got = {s.name: s for s in carry_over(["llama-server", "-m", "x.gguf", "--cache-ram", "0", "-kvu",
                                          "--no-cache-idle-slots", "--cache-reuse=256"], props)}
    assert got["cache-ram"].value == "0" and got["cache-ram"].keeps_state is False
    assert got["cache-ram"].source == "argv"
    assert got["kv-unified"].value == "on" and got["kv-unified"].keeps_state is True
    assert got["cache-idle-slots"].value == "off" and got["cache-idle-slots"].keeps_state is False
    # with cache-ram 0 idle slots have nowhere to go: the switch left on keeps nothing (the H100 cram0 run)
    inert = {c.name: c for c in carry_over(["llama-server", "--cache-ram", "0"], props)}
    assert inert["cache-idle-slots"].value == "on" and inert["cache-idle-slots"].keeps_state is False
    assert "inert" in inert["cache-idle-slots"].effect
    assert not likely_carried(list(inert.values())).startswith("likely cache-idle-slots")
    assert got["cache-reuse"].value == "256" and got["cache-reuse"].keeps_state is True
    assert got["slot-prompt-similarity"].source == "llama.cpp default (not in the argv)"
    default = {s.name: s for s in carry_over(["llama-server", "-m", "x.gguf"], props)}
    assert default["cache-ram"].value == "8192" and default["cache-ram"].keeps_state is True
    assert default["ctx-checkpoints"].value == "32" and default["cache-idle-slots"].value == "on"
    # unified KV is the pinned build's default only when the server picks the slots itself
    assert default["kv-unified"].value == "on"
    sized = {s.name: s for s in carry_over(["llama-server", "-m", "x.gguf", "--parallel", "4"], props)}
    assert sized["kv-unified"].value == "off" and sized["kv-unified"].keeps_state is False
    assert {s.name: s for s in carry_over(["llama-server", "-np", "4", "-no-kvu"], props)}["kv-unified"].value == "off"
    assert "cache-ram 8192 (default)" in carry_sentence(list(default.values()))
    assert likely_carried(list(default.values())).startswith("likely cache-ram 8192")


def test_props_win_over_the_argv_and_a_non_llama_server_without_argv_names_nothing() -> None:
    got = {s.name: s for s in carry_over(["llama-server"], {"build_info": "b", "cache_ram_mib": 1024})}
    assert got["cache-ram"].value == "1024" and got["cache-ram"].source == "/props"
    unknown = carry_over(None, {"build_info": "b"})
    assert {s.source for s in unknown} == {"llama.cpp default (the server's argv unknown)"}
    assert carry_over(None, None) == [] and "unknown" in carry_sentence([])
    off = carry_over(["llama-server", "--cache-ram", "0", "--no-cache-idle-slots", "--no-kv-unified",
                      "--no-cache-prompt", "--ctx-checkpoints", "0", "-sps", "0"], {"build_info": "b"})
    assert not any(s.keeps_state for s in off) and carry_sentence(off).startswith("state kept across requests: none")
    assert "something else carried over" in likely_carried(off)


def test_rest_line_counts_points_at_rest_and_fresh_servers() -> None:
    rests: list[PointRest | None] = [
        PointRest(at_rest=True, waited_s=0.2, source="/slots"),
        PointRest(at_rest=False, waited_s=120.0, source="/slots", reason="still busy"),
        PointRest(at_rest=True, waited_s=0.1, source="/slots", fresh_server_s=3.5)]
    line = rest_line(rests)
    assert "2 of 3 started from a server at rest" in line and "longest wait 120.0 s" in line
    assert "1 started with the server still busy" in line and "1 on a fresh server (start 3.5–3.5 s" in line
    assert rest_line([None]) == "points at rest: not checked"
