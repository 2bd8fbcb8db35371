"""`engine.prometheus`: the one reader of a server's Prometheus text, for the at-rest checks (`summed`) and the
bench's counters (`by_series`, `bench.server_metrics.parse_prometheus`). Every case names the wrong answer."""

from __future__ import annotations

import math

import pytest

from servepack.bench import server_metrics
from servepack.engine.prometheus import Sample, by_series, samples, summed

LLAMA = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1234
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
llamacpp:requests_deferred 1
llamacpp:kv_cache_usage_ratio 0.25
"""

VLLM = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 1.0
vllm:num_requests_running{model_name="b"} 2.0
vllm:num_requests_waiting{model_name="a"} 0.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="a"} 7.0
"""


def test_a_server_text_is_read_by_series_and_summed_over_label_sets() -> None:
    assert by_series(LLAMA) == {"llamacpp:prompt_tokens_total": 1234.0, "llamacpp:requests_processing": 2.0,
                                "llamacpp:requests_deferred": 1.0, "llamacpp:kv_cache_usage_ratio": 0.25}
    assert summed(LLAMA) == by_series(LLAMA)  # no labels: the same numbers
    assert by_series(VLLM) == {'vllm:num_requests_running{model_name="a"}': 1.0,
                               'vllm:num_requests_running{model_name="b"}': 2.0,
                               'vllm:num_requests_waiting{model_name="a"}': 0.0,
                               'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="a"}': 7.0}
    # the wrong answers: the last label set's value (2.0), or the first (1.0), or labels dropped from the series
    assert summed(VLLM)["vllm:num_requests_running"] == 3.0
    assert "vllm:num_requests_running" not in by_series(VLLM)


def test_the_bench_reads_through_the_same_parser() -> None:
    assert server_metrics.parse_prometheus is by_series


def test_a_label_value_may_hold_braces_commas_and_escaped_quotes() -> None:
    text = 'req_total{path="/a}b",q="x\\"y,z"} 4\nreq_total{path="/c"} 1\n'
    # the wrong answer (a label set read up to its first `}`): the first line skipped, req_total 1
    assert by_series(text) == {'req_total{path="/a}b",q="x\\"y,z"}': 4.0, 'req_total{path="/c"}': 1.0}
    assert summed(text) == {"req_total": 5.0}
    assert list(samples(text)) == [Sample("req_total", '{path="/a}b",q="x\\"y,z"}', 4.0),
                                   Sample("req_total", '{path="/c"}', 1.0)]
    # a comma after the last label and spaces around the pairs are allowed, an empty label set too
    assert by_series('m{ a = "1" , } 2\nn{} 3\n') == {'m{ a = "1" , }': 2.0, "n{}": 3.0}


def test_comments_blank_lines_and_timestamps() -> None:
    text = "# HELP m a help\n#m 5\n  # TYPE m gauge\n\n   \nm 3 1700000000000\r\n  n{a=\"b\"}  7  \n"
    # the wrong answers: `#m 5` read as m 5, the timestamp read as the value, an indented line skipped
    assert by_series(text) == {"m": 3.0, 'n{a="b"}': 7.0}


@pytest.mark.parametrize("value", ["NaN", "nan", "+Inf", "-Inf", "Inf"])
def test_a_value_that_is_not_finite_is_skipped(value: str) -> None:
    text = f"m{{a=\"1\"}} {value}\nm{{a=\"2\"}} 2\n"
    assert by_series(text) == {'m{a="2"}': 2.0}
    # the wrong answer: a sum of NaN or infinity where one label set is finite
    assert summed(text) == {"m": 2.0} and math.isfinite(summed(text)["m"])


@pytest.mark.parametrize("line", ["m", "m abc", "m 1.2.3", '{a="b"} 1', "1m 2", 'm{a="b" 1', 'm{a="b"}1', "m{a=b} 1",
                                  'm{a="unclosed} 1', "-m 1", "m{} ",
                                  'm{a="1" b="2"} 1', 'm{a="1",,b="2"} 1', 'm{="1"} 1'])
def test_a_line_that_is_no_sample_is_skipped_and_its_neighbours_read(line: str) -> None:
    text = f"before 1\n{line}\nafter 2\n"
    # the wrong answers: an exception, the line read as some value, or the lines around it lost
    assert by_series(text) == {"before": 1.0, "after": 2.0}
    assert summed(text) == {"before": 1.0, "after": 2.0}


def test_a_series_written_twice() -> None:
    text = "m 1\nm 2\n"
    assert by_series(text) == {"m": 2.0}  # the last value (a counter read once)
    assert summed(text) == {"m": 3.0}  # every sample line counts (the at-rest checks' sum)
    assert by_series("") == {} and summed("") == {}
