"""The smoke-suite plug point: a toy kind of suite added as one class and one table line (`smoke.runner.RUNNERS`) is
checked before any server starts (`pipeline.run.check_suites`) and run through `run_suite` with the one options object,
over real HTTP to the shared fake server; a name no runner handles is one usage line, as before."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from servepack.errors import UsageError
from servepack.pipeline.run import check_suites
from servepack.smoke import runner as runner_module
from servepack.smoke.attempts import exchange_attempt
from servepack.smoke.client import ChatClient
from servepack.smoke.result import SuiteResult, Verdict, case_result, run_cases
from servepack.smoke.runner import RUNNERS, run_suite, runner_for
from servepack.smoke.runners import SuiteOptions, SuiteRunner
from servepack.store import ResultsDir
from servepack.testing.fake_server import ScriptedServer


class _Endpoint:
    def __init__(self, base_url: str) -> None:
        self.base_url, self.model = base_url, "fake-model"


class ToyRunner:
    """A suite 'toy:N' of N cases, each one request; a case passes when the server answered at all."""

    def __init__(self) -> None:
        self.checked: list[tuple[str, Sequence[str] | None]] = []
        self.options: SuiteOptions | None = None

    def handles(self, suite: str) -> bool:
        return suite.startswith("toy:")

    def check(self, suite: str, case_ids: Sequence[str] | None) -> None:
        self.checked.append((suite, case_ids))
        if case_ids and any(not c.startswith("t") for c in case_ids):
            raise UsageError(f"--case {case_ids}: no such toy case")

    def run(self, base_url: str, model: str, suite: str, results: ResultsDir | None,
            options: SuiteOptions) -> SuiteResult:
        self.options = options
        cases = [f"t{i}" for i in range(int(suite.split(":", 1)[1]))]
        with ChatClient(base_url) as client:
            def one(case_id: str) -> Any:
                ex = client.send({"model": model, "messages": [{"role": "user", "content": case_id}],
                                  "max_tokens": options.max_tokens}, "nonstream")
                verdict = Verdict(strict_pass=ex.error is None, lenient_pass=ex.error is None)
                return case_result(case_id, "toy", "answers at all", [exchange_attempt(ex, 0, lambda _e: verdict)])

            return run_cases(suite, cases, one, results, options.progress, suite_version="toy 1", executed=False,
                             base_url=base_url, model=model, temperature=options.temperature,
                             repeat=options.repeat, runner_hash="0" * 64, scorer_version="toy")


@pytest.fixture()
def toy(monkeypatch: pytest.MonkeyPatch) -> Iterator[ToyRunner]:
    runner = ToyRunner()
    monkeypatch.setattr(runner_module, "RUNNERS", [runner, *RUNNERS])
    yield runner


def test_the_table_finds_each_kind_and_refuses_a_name_none_handles() -> None:
    kinds = {type(runner_for(name)).__name__ for name in ("layer_b", "bfcl", "bfcl:simple_python@3", "agent_smoke")}
    assert kinds == {"LayerBRunner", "BfclRunner", "CaseFileRunner"}
    with pytest.raises(UsageError, match=r"no smoke suite 'nosuch'.*\(check --suite\)"):
        runner_for("nosuch")
    with pytest.raises(UsageError, match="no smoke suite"):
        runner_for("../agent_smoke")  # never a path


def test_a_toy_suite_plugs_in_with_one_table_line(toy: ToyRunner, tmp_path: Path) -> None:
    check_suites(["toy:2"], ["t0"])
    assert toy.checked == [("toy:2", ["t0"])]
    with pytest.raises(UsageError, match="no such toy case"):
        check_suites(["toy:2"], ["x9"])
    with pytest.raises(UsageError, match="no smoke suite 'toy'"):  # the toy handles 'toy:N' only
        check_suites(["toy"], None)
    with ScriptedServer() as server:
        results = ResultsDir.create(tmp_path / "out")
        t0 = time.time()
        result = run_suite(_Endpoint(server.base_url), "toy:2", results, max_tokens=7, repeat=1)  # type: ignore[arg-type]
    assert time.time() - t0 < 60
    assert toy.options is not None and toy.options.max_tokens == 7 and toy.options.modes == ("nonstream", "stream")
    assert result.suite == "toy:2" and result.n == 2 and result.strict_passed == 2
    assert any((tmp_path / "out").glob("*.json"))  # written through run_cases like every runner's


def test_the_table_entries_satisfy_the_protocol() -> None:
    runners: list[SuiteRunner] = [*RUNNERS, ToyRunner()]  # mypy checks each against the Protocol
    assert [type(r).__name__ for r in runners[:3]] == ["LayerBRunner", "BfclRunner", "CaseFileRunner"]


@pytest.mark.parametrize(("suite", "module"), [("layer_b", "servepack.smoke.layer_b.run_layer_b"),
                                               ("bfcl:simple_python", "servepack.smoke.bfcl.run_bfcl_suite")])
def test_layer_b_and_bfcl_take_the_one_options_object(monkeypatch: pytest.MonkeyPatch, suite: str,
                                                      module: str) -> None:
    """Layer B's and BFCL's runners hand `run_suite`'s options on as the one SuiteOptions, every field as given
    (the wrong answers: a field dropped back to its default, modes or cases rebuilt, a second options object)."""
    seen: list[tuple[str, SuiteOptions]] = []

    def fake(base_url: str, model: str, name: str, results: ResultsDir | None, options: SuiteOptions) -> str:
        seen.append((name, options))
        return "ran"

    monkeypatch.setattr(module, fake)
    progress: list[str] = []
    got = run_suite(_Endpoint("http://127.0.0.1:9"), suite, None, temperature=0.5, max_tokens=33,  # type: ignore[arg-type]
                    repeat=3, modes=("stream",), progress=progress.append, case_ids=["c1", "c2"])
    assert got == "ran"  # type: ignore[comparison-overlap]
    assert seen == [(suite, SuiteOptions(temperature=0.5, max_tokens=33, repeat=3, modes=("stream",),
                                         progress=progress.append, case_ids=["c1", "c2"]))]
    assert seen[0][1] != SuiteOptions(temperature=0.5, max_tokens=33, repeat=3, progress=progress.append,
                                      case_ids=["c1", "c2"])  # the default modes are both
