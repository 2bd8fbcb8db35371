"""Roofline arithmetic for dense and MoE headers."""

from __future__ import annotations

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
