"""Derived metrics from hand-made exchanges: the glossary formulas, freshness, failures."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servepack.bench.client import StreamExchange
from servepack.bench.sample import build_sample


def _chat(t: float, obj: dict[str, Any]) -> tuple[float, bytes]:
    return t, json.dumps(obj).encode()


def _exchange(timings: dict[str, Any] | None, usage: dict[str, Any] | None, *, done: bool = True,
              n: int = 5, ttft: float = 0.5, itl: float = 0.1) -> StreamExchange:
    ev = [_chat(0.1, {"choices": [{"delta": {"role": "assistant", "content": None}}]})]
    ev += [_chat(ttft + i * itl, {"choices": [{"delta": {"content": "x"}}]}) for i in range(n)]
    final: dict[str, Any] = {"choices": []}
    if usage is not None:
        final["usage"] = usage
    if timings is not None:
        final["timings"] = timings
    ev.append(_chat(ttft + n * itl, final))
    if done:
        ev.append((ttft + n * itl, b"[DONE]"))
    return StreamExchange(t_sent_unix=1000.0, status=200, events=ev, end_s=ttft + n * itl)


def _build(ex: StreamExchange, endpoint_tokens: int = 100, gen: int = 5) -> Any:
    return build_sample(ex, "chat", context_tokens=100, concurrency=1, round_=0, stream=0, warmup=False,
                        nonce="N", endpoint_prompt_tokens=endpoint_tokens, exact=True, gen_tokens=gen)


TIMINGS = {"cache_n": 0, "prompt_n": 100, "prompt_ms": 400.0, "predicted_n": 5, "predicted_per_second": 10.0}
USAGE = {"prompt_tokens": 100, "completion_tokens": 5}


def test_glossary_metrics() -> None:
    s = _build(_exchange(TIMINGS, USAGE))
    assert s.ok and s.fresh and not s.short_output
    assert s.ttfr_ms == pytest.approx(100.0)
    assert s.ttft_ms == pytest.approx(500.0)
    assert s.e2e_ms == pytest.approx(1000.0)
    assert s.prompt_per_ttft_tok_s_client == pytest.approx(100 / 0.5)
    assert s.prompt_eval_tok_s_server == pytest.approx(250.0)
    assert s.decode_tok_s_client == pytest.approx(4 / 0.4)
    assert s.decode_tok_s_server == 10.0
    assert s.tpot_ms == pytest.approx(500 / 4)
    assert s.itl_ms_median == pytest.approx(100.0)
    assert s.decode_gap_pct == pytest.approx(0.0, abs=1e-9)
    assert s.prefill_gap_pct == pytest.approx(-20.0)
    assert s.server_prompt_tokens == 100


def test_cached_prefix_is_not_fresh() -> None:
    s = _build(_exchange({**TIMINGS, "cache_n": 24, "prompt_n": 76}, USAGE))
    assert s.ok and not s.fresh and "24 prompt tokens reused" in s.fresh_reason
    assert s.server_prompt_tokens == 100


def test_usage_cached_tokens_when_no_timings() -> None:
    fresh = _build(_exchange(None, {**USAGE, "prompt_tokens_details": {"cached_tokens": 0}}))
    unknown = _build(_exchange(None, USAGE))
    assert fresh.fresh and fresh.fresh_reason == "cached_tokens == 0"
    assert not unknown.fresh and "no cache counter" in unknown.fresh_reason


def test_wrong_prompt_length_is_not_fresh() -> None:
    s = _build(_exchange(TIMINGS, USAGE), endpoint_tokens=98)
    assert not s.fresh and "98 intended" in s.fresh_reason


def test_short_output_flagged() -> None:
    s = _build(_exchange({**TIMINGS, "predicted_n": 3}, {**USAGE, "completion_tokens": 3}, n=3), gen=5)
    assert s.ok and s.short_output and s.generated_tokens == 3


def test_missing_done_is_a_failure() -> None:
    s = _build(_exchange(TIMINGS, USAGE, done=False))
    assert not s.ok and not s.fresh and "end marker" in (s.failure or "")
    assert s.ttft_ms == pytest.approx(500.0)


def test_malformed_line_is_a_failure() -> None:
    ex = _exchange(TIMINGS, USAGE)
    ex.events.insert(3, (0.65, b"{oops"))
    s = _build(ex)
    assert not s.ok and (s.failure or "").startswith("malformed SSE line")
