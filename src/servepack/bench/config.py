"""What one bench run measures: marks, lengths, samples, concurrency, and how it talks to the server."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from servepack.bench.sample import PREFILL_LEGACY, metric_field
from servepack.packs.limits import MAX_CONCURRENCY as MAX_CONCURRENCY
from servepack.packs.schema import BenchPlan, ClaimsPolicy, Guards
from servepack.strict import Strict


class BenchSettings(Strict):
    """Frozen settings of one bench run; `from_plan` fills them from a pack, keyword overrides win."""

    model_config = ConfigDict(frozen=True)

    context_marks: tuple[int, ...] = Field(description="server-counted prompt tokens per cell")
    gen_tokens: int = Field(128, ge=1, description="tokens asked for per request (ignore_eos + max_tokens)")
    samples: int = Field(3, ge=1, description="measured rounds per cell; a round sends `concurrency` requests")
    concurrency: tuple[int, ...] = (1,)
    warmup: int = Field(0, ge=0, description="unmeasured requests before each cell, never sharing a prefix")
    # The chat template's fixed opening would otherwise be reused from the slot (cache_n > 0), so no chat
    # request could be a fresh sample; off by default, as in the LocalMaxxing protocol.
    cache_prompt: bool = False
    endpoint: Literal["chat", "completion"] = "chat"
    timeout_s: float = Field(600.0, gt=0, description="per-request deadline, stalled servers included")
    temperature: float = Field(0.0, ge=0)
    noise_floor_gen_tokens: int = Field(8, ge=1)
    bootstrap_seed: int = 20240917
    metrics_poll_s: float = Field(0.5, gt=0, description="/metrics poll period during concurrent cells")
    guards: Guards | None = None
    model_path: str | None = Field(None, description="GGUF for the roofline; else /props model_path")
    memory_bandwidth_gbs: float | None = Field(None, gt=0, description="else a short built-in probe")
    bandwidth_source: str | None = None
    llama_bench_json: str | None = Field(None, description="a llama_bench.json to pair with, for the ratio")
    # Sequential sampling and stall detection (claims quality): `samples` is the minimum number of rounds; more
    # are taken until the 95% interval of `interval_metric` is within ±interval_target_pct of the median, or
    # `max_samples` rounds or `max_cell_s` seconds are reached. `--samples N` fixes the count (max = N).
    interval_target_pct: float | None = Field(None, gt=0, le=100, description="±% of the median; None: fixed count")
    interval_metric: Literal["decode_tok_s_server", "decode_tok_s_client", "prompt_eval_tok_s_server",
                             "prompt_per_ttft_tok_s_client", "ttft_ms"] = Field("decode_tok_s_server",
                                                                        description="the Cell field the rule judges")
    max_samples: int = Field(20, ge=1, description="rounds per cell at most under the sequential rule")
    max_cell_s: float = Field(150.0, gt=0, description="seconds per cell after which no new round starts (below the "
                                                       "minimum too, once a sample was set aside)")
    # A round with a contended or stalled sample is set aside (kept in requests.jsonl, in no figure) and replaced;
    # a cell takes at most sample_budget × `samples` rounds, besides the extra clean ones the interval rule asks for.
    sample_budget: float = Field(3.0, ge=1, description="rounds a cell may take, set-aside ones included, ÷ samples")
    stall_floor_s: float = Field(5.0, gt=0, description="a stream is stalled after this long without a byte, "
                                                         "or stall_factor × the cell's p90 gap if longer (the "
                                                         "cell's first token: once the server fails a check)")
    stall_factor: float = Field(10.0, ge=1)

    @field_validator("interval_metric", mode="before")
    @classmethod
    def _renamed(cls, value: Any) -> Any:
        """A summary written before v2 names the prefill metric by its old name."""
        return PREFILL_LEGACY.get(value, value) if isinstance(value, str) else value

    @field_validator("context_marks", "concurrency")
    @classmethod
    def _positive(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value or any(v < 1 for v in value):
            raise ValueError("needs at least one value, each ≥ 1")
        return tuple(value)

    @field_validator("concurrency")
    @classmethod
    def _bounded(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if max(value) > MAX_CONCURRENCY:
            raise ValueError(f"{max(value)} concurrent streams is more than any bench opens (at most "
                             f"{MAX_CONCURRENCY}); llama-server serves at most its slots at once")
        return value

    @classmethod
    def from_plan(cls, plan: BenchPlan, claims: ClaimsPolicy, **overrides: Any) -> BenchSettings:
        """Settings from a pack's bench plan and claims policy; overrides that are None are ignored."""
        head = claims.headline
        values: dict[str, Any] = {
            "interval_target_pct": claims.interval_target_pct,
            "interval_metric": metric_field(head.metric, head.source),
            # an explicit sample count is a fixed count; the pack's count is the sequential rule's minimum
            "max_samples": overrides["samples"] if overrides.get("samples") else max(plan.samples, 20),
            "context_marks": tuple(plan.context_marks),
            "gen_tokens": plan.gen_tokens,
            "samples": plan.samples,
            "concurrency": tuple(plan.concurrency),
            "warmup": plan.warmup,
            "stall_floor_s": plan.stall_floor_s,
            "sample_budget": plan.sample_budget,
            "max_cell_s": plan.max_cell_s,
            "temperature": claims.temperature,
            "noise_floor_gen_tokens": claims.noise_floor_gen_tokens,
            "guards": plan.guards,
        }
        values.update({k: v for k, v in overrides.items() if v is not None and v != ()})
        return cls(**values)
