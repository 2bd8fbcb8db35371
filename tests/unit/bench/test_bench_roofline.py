"""Roofline arithmetic for dense and MoE headers."""

from __future__ import annotations

import pytest

from servepack.bench.roofline import bytes_per_token
from servepack.weights.gguf import GgufHeader, TensorInfo

F32 = 0


def _t(name: str, n: int) -> TensorInfo:
    return TensorInfo(name=name, shape=(n,), ggml_type=F32, offset=0)


def test_dense_reads_everything_but_a_looked_up_embedding() -> None:
    h = GgufHeader(version=3, metadata={"general.architecture": "llama"}, data_offset=0,
                   tensors=[_t("token_embd.weight", 1000), _t("output.weight", 1000), _t("blk.0.attn_q.weight", 500)])
    assert bytes_per_token(h) == ((1000 + 500) * 4, "dense")
    tied = GgufHeader(version=3, metadata={"general.architecture": "llama"}, data_offset=0,
                      tensors=[_t("token_embd.weight", 1000), _t("blk.0.attn_q.weight", 500)])
    assert bytes_per_token(tied) == ((1000 + 500) * 4, "dense")


def test_moe_counts_shared_plus_active_experts() -> None:
    meta = {"general.architecture": "qwen3moe", "qwen3moe.expert_count": 128, "qwen3moe.expert_used_count": 8}
    h = GgufHeader(version=3, metadata=meta, data_offset=0, tensors=[
        _t("output.weight", 1000), _t("token_embd.weight", 1000), _t("blk.0.attn_q.weight", 1000),
        _t("blk.0.ffn_up_exps.weight", 128 * 100), _t("blk.0.ffn_down_exps.weight", 128 * 100),
        _t("blk.0.ffn_up_shexp.weight", 300)])
    per, kind = bytes_per_token(h)
    assert kind == "moe"
    # output + attn_q + shared expert, whole; the embedding is a lookup; 8 of 128 routed experts
    assert per == (1000 + 1000 + 300) * 4 + 2 * 128 * 100 * 4 * 8 // 128
    assert per == 15_600


def test_weight_bytes_split_shared_and_routed_experts_and_a_step_reads_the_experts_its_tokens_use() -> None:
    from servepack.bench.roofline import WeightBytes, weight_bytes

    meta = {"general.architecture": "qwen3moe", "qwen3moe.expert_count": 128, "qwen3moe.expert_used_count": 8}
    h = GgufHeader(version=3, metadata=meta, data_offset=0, tensors=[
        _t("output.weight", 1000), _t("token_embd.weight", 1000), _t("blk.0.attn_q.weight", 1000),
        _t("blk.0.ffn_up_exps.weight", 128 * 100), _t("blk.0.ffn_up_shexp.weight", 300)])
    wb = weight_bytes(h)
    assert wb == WeightBytes(shared=(1000 + 1000 + 300) * 4, experts=128 * 100 * 4, expert_count=128,
                             expert_used_count=8)
    # one token reads its 8 of 128 experts: the same bytes as bytes_per_token's figure
    assert wb.per_step(1) == bytes_per_token(GgufHeader(version=3, metadata=meta, data_offset=0,
                                                        tensors=h.tensors))[0] == 9_200 + 3_200
    # 16 tokens a step: the experts any of them uses, 1 - (120/128)^16 = 64.4% of them, not 8/128 and not all
    assert wb.expert_share(16) == pytest.approx(0.6439, abs=1e-4)
    assert wb.per_step(16) == 9_200 + round(51_200 * wb.expert_share(16)) != 9_200 + 3_200
    assert wb.per_step(16) < wb.shared + wb.experts  # the wrong answer, every expert read, is never given
    assert wb.per_step(10_000) == wb.shared + wb.experts  # with enough tokens every expert is read
    # a dense header: one figure, whatever the streams
    dense = weight_bytes(GgufHeader(version=3, metadata={"general.architecture": "llama"}, data_offset=0,
                                    tensors=[_t("output.weight", 1000), _t("blk.0.attn_q.weight", 500)]))
    assert not dense.moe and dense.per_step(1) == dense.per_step(64) == 6_000 and dense.describe(64) == ""
    # expert tensors without the header's counts: every expert counted, and said to be an upper bound
    unknown = WeightBytes(shared=100, experts=1_000)
    assert unknown.per_step(1) == 1_100 and "upper bound" in unknown.describe(1)
