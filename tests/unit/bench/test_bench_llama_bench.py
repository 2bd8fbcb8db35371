"""llama-bench output parsing with log noise, flag mapping, and server ratios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servepack.bench.llama_bench import (
    LlamaBenchResult,
    bench_args,
    parse_output,
    read_result,
    shape_ratios,
    to_test,
)
from servepack.errors import UsageError

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


ARGV = ["llama-bench", "-m", "m.gguf", "-o", "json", "-r", "2", "-p", "512", "-n", "128"]


def _written(tmp_path: Path, **changes: object) -> Path:
    doc = LlamaBenchResult(argv=ARGV, exit_code=0, tests=[to_test(PP), to_test(TG)], ignored_lines=0)
    data = json.loads(doc.model_dump_json()) | changes
    path = tmp_path / "llama_bench.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("changes", "why"), [
    ({"exit_code": 1}, "llama-bench exited 1 after 2 test(s)"),
    ({"exit_code": -1}, "llama-bench stopped at its time limit after 2 test(s)"),
    ({"tests": []}, "no test"),
    ({"tests": [json.loads(to_test(PP).model_dump_json())]}, "no test for tg128, which its argv asks for"),
    ({"tests": [json.loads(to_test({**PP, "samples_ts": [158.0]}).model_dump_json()),
                json.loads(to_test(TG).model_dump_json())]}, "test pp512 has 1 sample(s), its argv's -r 2"),
    ({"tests": [json.loads(to_test(PP).model_dump_json()) | {"avg_ts": 999.0},
                json.loads(to_test(TG).model_dump_json())]},
     "test pp512's avg_ts is 999.0, llama-bench's own object says 160.0"),
])
def test_a_partial_llama_bench_json_is_refused_in_one_line(tmp_path: Path, changes: dict[str, object],
                                                           why: str) -> None:
    """Issue 35 leftover: the llama_bench.json a failed llama-bench leaves (LlamaBenchFailed.partial), one cut
    short or one whose fields disagree was accepted as the run to compare with. The wrong answer: no error."""
    assert len(read_result(_written(tmp_path), "x").tests) == 2  # the whole run is read
    path = _written(tmp_path, **changes)
    with pytest.raises(UsageError) as exc:
        read_result(path, f"--llama-bench-json {path}")
    assert str(exc.value) == (f"--llama-bench-json {path}: a partial llama_bench.json ({why}); give a "
                              "llama_bench.json that `servepack llama-bench` wrote from a llama-bench run that "
                              "finished")
