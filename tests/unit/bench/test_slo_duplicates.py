"""Two --slo on the same metric and quantile are refused, whichever is tighter and even when they agree: the sweep
silently held the point to both before (the tighter one decided), so `--slo ttft_p90=1s --slo ttft_p90=2s` read
as a 2 s SLO was a 1 s one. One line naming both, exit 2, before anything is reached."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from servepack.bench.capacity import parse_slos
from servepack.cli.main import cli
from servepack.errors import UsageError


@pytest.mark.parametrize(("texts", "first", "second", "what"), [
    (["ttft_p90=1s", "ttft_p90=2s"], "ttft_p90=1s", "ttft_p90=2s", "ttft p90"),
    (["ttft_p90=1s", "TTFT_p90 = 1000ms"], "ttft_p90=1s", "ttft_p90=1000ms", "ttft p90"),
    (["decode_p10=5", "e2e_p50=2s", "decode_p10.0=9"], "decode_p10=5", "decode_p10.0=9", "decode p10"),
    (["ttft_median=1s", "ttft_p50=2s"], "ttft_median=1s", "ttft_p50=2s", "ttft p50"),
])
def test_two_bounds_on_one_metric_and_quantile_are_refused(texts: list[str], first: str, second: str,
                                                          what: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_slos(texts)
    assert str(err.value) == (f"--slo {first!r} and --slo {second!r}: two bounds on {what}; give each metric and "
                              "quantile once")


def test_different_metrics_or_quantiles_pass() -> None:
    slos = parse_slos(["ttft_p90=1s", "ttft_p50=500ms", "e2e_p90=3s", "decode_p10=5"])
    assert [(s.metric, s.quantile, s.bound) for s in slos] == [
        ("ttft", 0.9, 1000.0), ("ttft", 0.5, 500.0), ("e2e", 0.9, 3000.0), ("decode", 0.1, 5.0)]


def test_the_cli_refuses_before_reaching_the_server() -> None:
    result = CliRunner().invoke(cli, ["capacity", "--base-url", "http://127.0.0.1:9", "--model", "m",
                                      "--slo", "ttft_p90=1s", "--slo", "ttft_p90=2s"])
    assert result.exit_code == 2 and result.stderr.splitlines() == [
        "servepack: error: --slo 'ttft_p90=1s' and --slo 'ttft_p90=2s': two bounds on ttft p90; give each metric "
        "and quantile once"]
