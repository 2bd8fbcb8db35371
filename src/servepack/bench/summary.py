"""server_bench.json: per-cell statistics, freshness, failures, roofline, llama-bench ratio, memory."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Final, Literal

from pydantic import Field

from servepack.bench.config import BenchSettings
from servepack.bench.llama_bench import ShapeRatio
from servepack.bench.observer import ObserverCost
from servepack.bench.roofline import Roofline
from servepack.bench.sample import (
    PREFILL_DEFINITIONS,
    PROMPT_EVAL,
    PROMPT_PER_TTFT,
    REQUEST_SCHEMA,
    RequestSample,
    prefill_alias,
)
from servepack.bench.stats import Interval, Stat, StopReason, describe, interval_report
from servepack.host.contention import ContentionSummary
from servepack.host.energy import Energy
from servepack.host.memory import GuardEvent, MemorySummary
from servepack.strict import Strict

SUMMARY_SCHEMA: Final = "servepack.server_bench/v1"


class Fact(Strict):
    """A capability of the server or the run: known with a value, or unavailable with a reason."""

    state: Literal["known", "unavailable"]
    value: Any = None
    reason: str | None = None


class Cell(Strict):
    """One (context mark, concurrency) cell. Prefill and TTFT use fresh samples only; no figure uses a sample set
    aside (contended, stalled), which requests.jsonl keeps with its reason."""

    context_tokens: int
    concurrency: int
    gen_tokens: int
    n: int = Field(description="measured requests sent (warmups excluded)")
    n_ok: int
    n_fresh: int
    ttft_ms: Stat
    ttfr_ms: Stat
    e2e_ms: Stat
    tpot_ms: Stat
    itl_ms: Stat = Field(description="every inter-chunk gap of the cell's ok requests, pooled")
    prompt_per_ttft_tok_s_client: Stat = Field(validation_alias=prefill_alias(PROMPT_PER_TTFT),
                                               description=PREFILL_DEFINITIONS[PROMPT_PER_TTFT])
    prompt_eval_tok_s_server: Stat = Field(validation_alias=prefill_alias(PROMPT_EVAL),
                                           description=PREFILL_DEFINITIONS[PROMPT_EVAL])
    decode_tok_s_client: Stat
    decode_tok_s_server: Stat
    decode_tok_s_aggregate: Stat = Field(description="per round: Σ(generated − 1) ÷ (last token − first token)")
    prefill_gap_pct: Stat
    decode_gap_pct: Stat
    server_prompt_tokens: dict[str, int] = Field(description="server-counted prompt tokens → requests")
    noise_floor: bool = Field(description="gen tokens at or below the pack's noise floor: shown, never a headline")
    short_outputs: int
    failures: list[str]
    deferred: bool = Field(description="llama-server deferred requests: concurrency exceeded its slots")
    requests_deferred_max: float | None
    metrics_diff: dict[str, float] | None
    stopped: str | None = Field(None, description="why the cell stopped early (guard), if it did")
    stalls: int = Field(0, description="requests cut as stalled (no byte past the bound)")
    contended: int | None = Field(None, description="measured requests taken while the host was contended; "
                                                    "None: the host was not watched")
    contention: list[str] = Field(default_factory=list, description="why, for the contended requests (first few)")
    interval: Interval | None = Field(None, description="the headline metric's achieved interval vs the target")
    n_clean: int | None = Field(None, description="ok samples not set aside: the ones behind every figure "
                                                  "(None: recorded before samples were set aside)")
    n_set_aside: int | None = Field(None, description="samples set aside (contended, stalled) and replaced")
    set_aside_why: list[str] = Field(default_factory=list, description="why, per kind (first few)")
    figures_contended: bool = Field(False, description="no clean sample was ok: the figures are the contended "
                                                       "samples', shown labelled, never claim-grade")

    def set_aside_text(self) -> str:
        """'4 of 9 samples set aside (3 host contended: steal 25%; 1 stalled)', or '' when none were."""
        if not self.n_set_aside:
            return ""
        return f"{self.n_set_aside} of {self.n} samples set aside ({'; '.join(self.set_aside_why)})"


class CellEnergy(Strict):
    """The joules of one cell's measured window (warmups excluded), by meter, and per output token."""

    context_tokens: int
    concurrency: int
    energy: Energy


class BenchSummary(Strict):
    schema_version: Literal["servepack.server_bench/v1"] = SUMMARY_SCHEMA
    status: Literal["complete", "partial"]
    stopped_reason: str | None = None
    started_at: str
    ended_at: str
    wall_s: float
    base_url: str
    model: str
    mode: Literal["launch", "attach"]
    server_kind: Literal["llama-server", "openai-compatible"]
    settings: BenchSettings
    cells: list[Cell]
    all_fresh: bool
    prompt_token_report: str
    facts: dict[str, Fact]
    roofline: Roofline | None
    roofline_unavailable: str | None = None
    llama_bench_ratio: list[ShapeRatio] | None = None
    memory: MemorySummary | None = None
    guard_event: GuardEvent | None = None
    host: ContentionSummary | None = Field(None, description="host contention during the bench (None: not watched)")
    requests_file: str = "requests.jsonl"
    observer: ObserverCost | None = Field(None, description="CPU-seconds of servepack and of the server meanwhile")
    energy: list[CellEnergy] = Field(default_factory=list, description="per cell: joules over its measured window "
                                     "and per output token, by meter; absent or unreadable meters say why")


def _agg_decode(samples: Sequence[RequestSample]) -> list[float]:
    rounds: dict[int, list[RequestSample]] = {}
    for s in samples:
        if s.ok and not s.short_output and len(s.chunk_ms) > 1 and s.generated_tokens:
            rounds.setdefault(s.round, []).append(s)
    out = []
    for group in rounds.values():
        # Absolute times: each request's chunk offsets are relative to its own send time.
        first = min(s.t_sent_unix + s.chunk_ms[0] / 1000 for s in group)
        last = max(s.t_sent_unix + s.chunk_ms[-1] / 1000 for s in group)
        tokens = sum((s.generated_tokens or 1) - 1 for s in group)
        if last > first:
            out.append(tokens / (last - first))
    return out


def clean(samples: Sequence[RequestSample]) -> list[RequestSample]:
    """The samples not set aside (a v1 record set none aside)."""
    return [s for s in samples if s.set_aside is None]


def figure_samples(samples: Sequence[RequestSample]) -> tuple[list[RequestSample], bool]:
    """The samples a cell's figures use, and whether they are contended ones: the clean samples; when not one of
    them is ok (a host busy throughout), the contended ones, so the figures exist, labelled, never claim-grade.
    A stalled sample is never in a figure."""
    used = clean(samples)
    if any(s.ok for s in used):
        return used, False
    contended = [s for s in samples if s.set_aside is not None and s.ok and not s.stalled]
    return (contended, True) if contended else (used, False)


def all_fresh(measured: Sequence[RequestSample]) -> bool:
    """Something was measured, and every sample a figure may use was fresh (the set-aside ones are in no figure;
    a cell left with none has no figure, which the claim policy reports as such)."""
    return bool(measured) and all(s.fresh for s in clean(measured))


def _why_aside(aside: Sequence[RequestSample]) -> list[str]:
    """'3 host contended: steal 25% …', '1 stalled': counts per kind with the first reason of each."""
    kinds: dict[str, list[str]] = {}
    for s in aside:
        kind = "stalled" if s.stalled else "host contended"
        detail = (s.set_aside or "").split(": ", 1)[-1] if not s.stalled else ""
        kinds.setdefault(kind, []).append(detail)
    out = []
    for kind, details in kinds.items():
        first = next((d for d in details if d), "")
        out.append(f"{len(details)} {kind}" + (f": {first[:120]}" if first else ""))
    return out


def metric_values(samples: Sequence[RequestSample], name: str) -> list[float | None]:
    """The per-request values behind a Cell's Stat: prefill and TTFT from fresh samples, decode from full ones."""
    ok = [s for s in figure_samples(samples)[0] if s.ok]
    if name.startswith(("prompt", "prefill", "ttft", "ttfr")):
        chosen = [s for s in ok if s.fresh]
    elif name.startswith(("decode", "e2e", "tpot")):
        chosen = [s for s in ok if not s.short_output]
    else:
        chosen = ok
    return [getattr(s, name) for s in chosen]


def cell_summary(
    samples: Sequence[RequestSample], *, context_tokens: int, concurrency: int, settings: BenchSettings,
    deferred_max: float | None, metrics_diff: dict[str, float] | None, stopped: str | None,
    interval_stop: StopReason | None = None, ci: bool = True,
) -> Cell:
    """One cell's statistics; `ci=False` skips the bootstrap intervals (see `stats.describe`)."""
    seed = settings.bootstrap_seed
    every_ok = [s for s in samples if s.ok]
    used, from_contended = figure_samples(samples)
    ok = [s for s in used if s.ok]
    fresh = [s for s in ok if s.fresh]
    full = [s for s in ok if not s.short_output]
    itl = [b - a for s in ok for a, b in zip(s.chunk_ms, s.chunk_ms[1:], strict=False)]
    counts = Counter(str(s.server_prompt_tokens) for s in samples if s.server_prompt_tokens is not None)
    watched = [s for s in samples if s.contended is not None]
    contended = [s for s in watched if s.contended]
    aside = [s for s in samples if s.set_aside is not None]
    versioned = any(s.schema_version == REQUEST_SCHEMA for s in samples)  # v1 records set nothing aside
    cell = Cell(
        context_tokens=context_tokens, concurrency=concurrency, gen_tokens=settings.gen_tokens,
        n=len(samples), n_ok=len(every_ok), n_fresh=len([s for s in every_ok if s.fresh]),
        ttft_ms=describe([s.ttft_ms for s in fresh], seed=seed, ci=ci),
        ttfr_ms=describe([s.ttfr_ms for s in fresh], seed=seed, ci=ci),
        e2e_ms=describe([s.e2e_ms for s in full], seed=seed, ci=ci),
        tpot_ms=describe([s.tpot_ms for s in full], seed=seed, ci=ci),
        itl_ms=describe(itl, seed=seed, ci=ci),
        prompt_per_ttft_tok_s_client=describe([s.prompt_per_ttft_tok_s_client for s in fresh], seed=seed, ci=ci),
        prompt_eval_tok_s_server=describe([s.prompt_eval_tok_s_server for s in fresh], seed=seed, ci=ci),
        decode_tok_s_client=describe([s.decode_tok_s_client for s in full], seed=seed, ci=ci),
        decode_tok_s_server=describe([s.decode_tok_s_server for s in full], seed=seed, ci=ci),
        decode_tok_s_aggregate=describe(_agg_decode(used), seed=seed, ci=ci),
        prefill_gap_pct=describe([s.prefill_gap_pct for s in fresh], seed=seed, ci=ci),
        decode_gap_pct=describe([s.decode_gap_pct for s in full], seed=seed, ci=ci),
        server_prompt_tokens=dict(sorted(counts.items())),
        noise_floor=settings.gen_tokens <= settings.noise_floor_gen_tokens,
        short_outputs=sum(1 for s in ok if s.short_output),
        failures=[f"round {s.round} stream {s.stream}: {s.failure}" for s in samples if not s.ok],
        deferred=bool(deferred_max and deferred_max > 0), requests_deferred_max=deferred_max,
        metrics_diff=metrics_diff, stopped=stopped, stalls=sum(1 for s in samples if s.stalled),
        contended=len(contended) if watched else None,
        contention=list(dict.fromkeys(s.host.reason for s in contended if s.host and s.host.reason))[:3],
        n_clean=len([s for s in clean(samples) if s.ok]) if versioned else None,
        n_set_aside=len(aside) if versioned else None, figures_contended=from_contended,
        set_aside_why=_why_aside(aside),
    )
    if interval_stop is not None or settings.interval_target_pct is not None:
        stat: Stat = getattr(cell, settings.interval_metric)
        cell.interval = interval_report(stat, settings.interval_metric, settings.interval_target_pct,
                                        interval_stop or "fixed count")
    return cell


def _words(n: int) -> str:
    small = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    return small[n] if n < len(small) else f"{n:,}"


def prompt_token_report(samples: Sequence[RequestSample]) -> str:
    """The honest sentence, per mark: how many prompts contained how many server-counted endpoint tokens."""
    parts = []
    for mark in sorted({s.context_tokens for s in samples}):
        group = [s for s in samples if s.context_tokens == mark and s.ok]
        counted = Counter(s.server_prompt_tokens for s in group if s.server_prompt_tokens is not None)
        tail = f" (target {mark:,})"
        if not counted:
            counted = Counter(s.endpoint_prompt_tokens for s in group)
            exact = all(s.prompt_sized_exactly for s in group)
            tail = f" (target {mark:,}; {'by /tokenize' if exact else 'estimated'}, the server reported no count)"
        bits = []
        for i, (tokens, n) in enumerate(sorted(counted.items(), key=lambda kv: (-kv[1], -(kv[0] or 0)))):
            noun = (" prompt" if n == 1 else " prompts") if i == 0 else ""
            word = _words(n).capitalize() if i == 0 else _words(n)
            bits.append(f"{word}{noun} contained {tokens:,}" + (" endpoint tokens" if i == 0 else ""))
        if bits:
            parts.append(" and ".join(bits) + tail + ".")
    return " ".join(parts) or "No measured prompt completed."


def claim_blockers(summary: BenchSummary) -> list[str]:
    """What, in a bench summary, makes the run ineligible for a claim (empty when nothing does)."""
    out = []
    if not summary.all_fresh:
        out.append("bench: not every sample was fresh (see requests.jsonl fresh_reason)")
    if summary.guard_event is not None:
        out.append(f"bench stopped by guard {summary.guard_event.guard}")
    return out
