"""llama-bench output parsing with log noise, flag mapping, and server ratios."""

from __future__ import annotations

import json

import pytest

from servepack.bench.llama_bench import LlamaBenchResult, bench_args, parse_output, shape_ratios, to_test

PP = {"n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 160.0, "stddev_ts": 2.0, "samples_ts": [158.0, 162.0]}
TG = {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": 40.0, "stddev_ts": 0.5, "samples_ts": [39.5, 40.5]}


def test_parse_with_log_lines_mixed_in() -> None:
    noisy = ("load_backend: loaded CPU backend\nmain: warming up\n[\n" + json.dumps(PP, indent=2)
             + ",\nllama_kv_cache: some log line {not json\n" + json.dumps(TG) + "\n]\nbye\n")
    objects, ignored = parse_output(noisy)
    assert [o["avg_ts"] for o in objects] == [160.0, 40.0]
    assert ignored >= 3


def test_kinds_and_ratios() -> None:
    res = LlamaBenchResult(argv=["x"], exit_code=0, tests=[to_test(PP), to_test(TG)], ignored_lines=0)
    assert [t.kind for t in res.tests] == ["pp", "tg"]
    ratios = shape_ratios(res, [(512, 128, 150.0, 36.0), (1024, 128, 140.0, None)])
    got = {(r.metric, r.context_tokens): r.ratio for r in ratios}
    assert got == {("prefill", 512): pytest.approx(150 / 160), ("decode", 512): pytest.approx(0.9)}


def test_flag_mapping() -> None:
    flags = {"n-gpu-layers": -1, "flash-attn": "on", "batch-size": 2048, "ubatch-size": 512,
             "cache-type-k": "q4_0", "cache-type-v": "q4_0", "threads": 2, "jinja": True, "ctx-size": 8192}
    assert bench_args(flags) == ["-ngl", "-1", "-fa", "1", "-b", "2048", "-ub", "512", "-ctk", "q4_0",
                                 "-ctv", "q4_0", "-t", "2"]
