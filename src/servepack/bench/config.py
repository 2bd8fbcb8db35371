"""What one bench run measures: marks, lengths, samples, concurrency, and how it talks to the server."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servepack.packs.schema import BenchPlan, ClaimsPolicy, Guards

# No bench opens more concurrent streams than this, whatever the server: each is a socket, a prompt held in memory
# for every sample round, and a task; llama-server itself serves at most its slots at once.
MAX_CONCURRENCY = 1024


class BenchSettings(BaseModel):
    """Frozen settings of one bench run; `from_plan` fills them from a pack, keyword overrides win."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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
        values: dict[str, Any] = {
            "context_marks": tuple(plan.context_marks),
            "gen_tokens": plan.gen_tokens,
            "samples": plan.samples,
            "concurrency": tuple(plan.concurrency),
            "warmup": plan.warmup,
            "temperature": claims.temperature,
            "noise_floor_gen_tokens": claims.noise_floor_gen_tokens,
            "guards": plan.guards,
        }
        values.update({k: v for k, v in overrides.items() if v is not None and v != ()})
        return cls(**values)
