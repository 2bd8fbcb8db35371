"""Decode roofline: weight bytes read per generated token against memory bandwidth."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from servepack.strict import Strict
from servepack.weights.gguf import GgufHeader, TensorInfo, read_header

ROOFLINE_NOTE = "weights only: KV-cache reads, activations and the embedding lookup are left out"


class Roofline(Strict):
    """The bandwidth ceiling for decode and how close the measured decode came to it."""

    kind: Literal["dense", "moe"]
    bytes_per_token: int
    total_weight_bytes: int
    expert_count: int | None
    expert_used_count: int | None
    bandwidth_gbs: float
    bandwidth_source: str
    ceiling_tok_s: float
    decode_tok_s: float | None
    decode_source: str | None
    fraction_of_ceiling: float | None
    note: str = ROOFLINE_NOTE


def _is_expert(t: TensorInfo) -> bool:
    return "_exps" in t.name


def bytes_per_token(header: GgufHeader) -> tuple[int, Literal["dense", "moe"]]:
    """Dense: every weight once; MoE: shared weights plus the used fraction of the expert tensors."""
    names = {t.name for t in header.tensors}
    # With a separate output matrix the token embedding is only looked up (one row), not read whole.
    skip = {"token_embd.weight"} if "output.weight" in names else set()
    shared = sum(t.n_bytes for t in header.tensors if not _is_expert(t) and t.name not in skip)
    experts = sum(t.n_bytes for t in header.tensors if _is_expert(t))
    n, used = header.expert_count, header.expert_used_count
    if experts and n and used:
        return shared + experts * used // n, "moe"
    return shared + experts, "dense"


@dataclass(frozen=True)
class WeightBytes:
    """The weight bytes a decode step reads, split as an MoE reads them: `shared` tensors every step, the routed
    `experts` tensors only for the experts some token of the step was sent to."""

    shared: int
    experts: int
    expert_count: int | None = None
    expert_used_count: int | None = None

    @property
    def moe(self) -> bool:
        """Routed expert tensors and the header's counts for them: the step reads only the experts used."""
        return bool(self.experts and self.expert_count and self.expert_used_count)

    def expert_share(self, streams: float) -> float:
        """The share of the routed experts' bytes one step reads with `streams` tokens in it: k/n for one token;
        for several, the expected share of experts at least one of them uses, 1 − (1 − k/n)^streams, with routing
        taken as uniform (a shape twin's random weights route so). 1 for a dense model or unknown counts."""
        if not self.moe:
            return 1.0
        assert self.expert_count and self.expert_used_count
        used = min(self.expert_used_count, self.expert_count) / self.expert_count
        return float(1.0 - (1.0 - used) ** max(1.0, streams))

    def per_step(self, streams: float) -> int:
        return self.shared + round(self.experts * self.expert_share(streams))

    def describe(self, streams: float) -> str:
        """How the bytes a step were counted, in a few words ("" for a dense model)."""
        if self.moe:
            assert self.expert_count and self.expert_used_count
            return (f"MoE: {self.expert_used_count} of {self.expert_count} experts a token, about "
                    f"{self.expert_share(streams) * self.expert_count:,.1f} of {self.expert_count} a step at "
                    f"{streams:g} streams, routing taken as uniform")
        if self.experts:
            return ("every expert counted: the header gives no expert_count and expert_used_count, so this is an "
                    "upper bound")
        return ""


def weight_bytes(header: GgufHeader) -> WeightBytes:
    """Shared and routed-expert weight bytes a decode step reads (the embedding only looked up, as below)."""
    names = {t.name for t in header.tensors}
    skip = {"token_embd.weight"} if "output.weight" in names else set()
    return WeightBytes(
        shared=sum(t.n_bytes for t in header.tensors if not _is_expert(t) and t.name not in skip),
        experts=sum(t.n_bytes for t in header.tensors if _is_expert(t)),
        expert_count=header.expert_count, expert_used_count=header.expert_used_count)


def probe_bandwidth_gbs(size_mib: int = 256, seconds: float = 1.0) -> float:
    """Single-threaded memcpy bandwidth (read + write bytes per second), best of repeated copies."""
    src = bytearray(size_mib << 20)
    dst = bytearray(size_mib << 20)
    view = memoryview(dst)
    best = 0.0
    deadline = time.perf_counter() + seconds
    while True:
        t = time.perf_counter()
        view[:] = src
        dt = time.perf_counter() - t
        best = max(best, 2 * len(src) / dt / 1e9)
        if time.perf_counter() > deadline:
            return best


def roofline(
    model_path: Path, bandwidth_gbs: float, bandwidth_source: str, decode_tok_s: float | None,
    decode_source: str | None,
) -> Roofline:
    header = read_header(model_path)
    per_token, kind = bytes_per_token(header)
    ceiling = bandwidth_gbs * 1e9 / per_token
    return Roofline(
        kind=kind, bytes_per_token=per_token, total_weight_bytes=sum(t.n_bytes for t in header.tensors),
        expert_count=header.expert_count, expert_used_count=header.expert_used_count,
        bandwidth_gbs=bandwidth_gbs, bandwidth_source=bandwidth_source, ceiling_tok_s=ceiling,
        decode_tok_s=decode_tok_s, decode_source=decode_source,
        fraction_of_ceiling=decode_tok_s / ceiling if decode_tok_s else None,
    )
