"""Verdicts per metric, and the facts stated before any number: wrong answers must not say REPRODUCED."""

from __future__ import annotations

import pytest

from servepack.bench.stats import describe
from servepack.reproduce.protocol import RecordFacts, RecordFigure
from servepack.reproduce.translate import translate
from servepack.reproduce.verdict import LocalFacts, band, comparability, judge, not_comparable

SEED_DECODE = RecordFigure("decode_tok_s", 19.3, (19.2, 19.3, 19.3, 19.3, 19.4, 19.4, 19.4), "notes")
SEED_TTFT = RecordFigure("ttft_ms", 10431.6, (10897.33, 10419.64, 10418.99, 10462.31, 10454.06, 10376.58, 10431.6),
                         "notes")
CELL = "8,192 ctx × 1,024 gen @c1"


def run(*values: float):  # type: ignore[no-untyped-def]
    return describe(list(values))


def test_a_run_inside_the_band_is_reproduced() -> None:
    v = judge(CELL, "decode_tok_s", SEED_DECODE, run(19.1, 19.2, 19.3, 19.3, 19.4, 19.3, 19.2), reasons=[])
    assert v.verdict == "REPRODUCED"
    assert v.band == pytest.approx((19.3 * 0.95, 19.3 * 1.05))
    assert "run median 19.30 (n=7" in v.reason


def test_a_faster_run_is_faster_not_reproduced() -> None:
    v = judge(CELL, "decode_tok_s", SEED_DECODE, run(25.0, 25.2, 24.9, 25.1, 25.3, 25.0, 25.1), reasons=[])
    assert v.verdict == "FASTER"
    assert "above the band" in v.reason


def test_a_record_claiming_more_than_the_run_gives_slower() -> None:
    v = judge(CELL, "decode_tok_s", SEED_DECODE, run(12.0, 12.1, 11.9, 12.2, 12.0), reasons=[])
    assert v.verdict == "SLOWER"


def test_ttft_is_faster_when_lower() -> None:
    slow = judge(CELL, "ttft_ms", SEED_TTFT, run(15000, 15100, 14900, 15050, 15020), reasons=[])
    fast = judge(CELL, "ttft_ms", SEED_TTFT, run(5000, 5100, 4900, 5050, 5020), reasons=[])
    assert (slow.verdict, fast.verdict) == ("SLOWER", "FASTER")


def test_a_different_host_is_not_comparable_even_with_the_same_numbers() -> None:
    v = judge(CELL, "decode_tok_s", SEED_DECODE, run(19.2, 19.3, 19.3, 19.3, 19.4, 19.4, 19.4),
              reasons=["hardware differs"])
    assert v.verdict == "NOT_COMPARABLE"
    assert v.reason.startswith("hardware differs: a reproduction cannot be claimed")


def test_too_few_samples_are_not_comparable() -> None:
    v = judge(CELL, "decode_tok_s", SEED_DECODE, run(19.3, 19.3, 19.3), reasons=[])
    assert v.verdict == "NOT_COMPARABLE"
    assert "too few samples for a 95% interval (n=3 < 5)" in v.reason


def test_an_interval_across_the_band_edge_is_inconclusive() -> None:
    v = judge(CELL, "decode_tok_s", SEED_DECODE, run(18.0, 19.3, 21.5, 19.0, 21.0, 17.5, 20.8), reasons=[])
    assert v.verdict == "NOT_COMPARABLE" and v.reason.startswith("inconclusive")


def test_no_figure_on_either_side_is_said() -> None:
    assert "states no prefill_tok_s figure" in judge(CELL, "prefill_tok_s", None, run(1, 2, 3, 4, 5), reasons=[]).reason
    assert "no decode_tok_s samples" in judge(CELL, "decode_tok_s", SEED_DECODE, None, reasons=[]).reason
    assert judge(CELL, "decode_tok_s", SEED_DECODE, describe([]), reasons=[]).verdict == "NOT_COMPARABLE"


def test_the_band_joins_the_spread_and_the_tolerance() -> None:
    wide = RecordFigure("decode_tok_s", 100.0, (80.0, 100.0, 130.0), "notes")
    assert band(wide, 5.0) == (80.0, 130.0)
    assert band(RecordFigure("decode_tok_s", 100.0, (), "row"), 10.0) == pytest.approx((90.0, 110.0))


def facts(**over: object) -> RecordFacts:
    base: dict[str, object] = dict(
        id="r", hardware_ids=("cpu-x-2c-24gb",), hardware_label=None, engine_name="llama.cpp",
        engine_version="version: 1 (abc1234)", engine_commit="abc1234", engine_sha256=None,
        model_instance_id="tiny", model_sha256="a" * 64, model_sha256_where="metadata.servepack.model_sha256",
        pack_id=None, arguments=("llama-server",), arguments_where="x", fidelity="faithful")
    base.update(over)
    return RecordFacts(**base)  # type: ignore[arg-type]


HERE = LocalFacts(hardware_ids=("cpu-x-2c-24gb",), hardware_label="box", engine_version="version: 1 (abc1234)\nb",
                  engine_sha256="e" * 64, engine_commit="abc1234", model_sha256="a" * 64, model_path="/m/t.gguf")
PLAIN = translate("llama.cpp", ["llama-server", "-c", "512"], source="s")


def states(rec: RecordFacts, here: LocalFacts = HERE) -> dict[str, str]:
    return {c.what: c.state for c in comparability(rec, here, PLAIN)}


def test_same_host_engine_and_model_are_comparable() -> None:
    assert states(facts()) == {"hardware": "same", "engine build": "same", "model": "same"}
    assert not_comparable(comparability(facts(), HERE, PLAIN)) == []


def test_each_difference_is_stated() -> None:
    assert states(facts(hardware_ids=("dgx-spark-gb10-128gb",)))["hardware"] == "differs"
    assert states(facts(engine_commit="04b2b72", engine_version="1 (04b2b72)"))["engine build"] == "differs"
    assert states(facts(engine_sha256="f" * 64))["engine build"] == "differs"  # same commit, another binary
    assert states(facts(model_sha256="b" * 64))["model"] == "differs"
    assert states(facts(model_sha256=None))["model"] == "unknown"
    unknown_engine = LocalFacts(hardware_ids=("cpu-x-2c-24gb",), hardware_label="box", engine_unknown="not found",
                                model_sha256="a" * 64)
    assert states(facts(), unknown_engine)["engine build"] == "unknown"


def test_a_launch_blocker_is_a_difference() -> None:
    lora = translate("llama.cpp", ["llama-server", "--lora", "/a.gguf"], source="s")
    checks = comparability(facts(), HERE, lora)
    assert [c.state for c in checks if c.what == "launch"] == ["differs"]
    assert not_comparable(checks)[0].startswith("launch differs: the record's launch used --lora /a.gguf")
