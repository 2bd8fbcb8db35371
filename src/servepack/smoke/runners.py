"""The plug point for smoke suites: what a `SuiteRunner` is and the one `SuiteOptions` every runner takes. The runners
and their table (`RUNNERS`, `runner_for`) are in `smoke.runner`.

A runner says which suite names are its own (`handles`), checks a suite and its `--case` ids before any server starts
(`check`: UsageError, exit 2), and runs it against an endpoint with one `SuiteOptions` (`run`), returning the
`SuiteResult` every runner writes through `smoke.result.run_cases`. Adding a kind of suite is one class and one
line in `RUNNERS`; `runner_for` takes the first runner that handles a name, and a name none handles is one usage
line naming the suites there are. The shipped case files (`smoke/suites/<name>/`) are the last entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from servepack.progress import Progress
from servepack.smoke.result import SuiteResult
from servepack.store import ResultsDir

MODES = ("nonstream", "stream")


@dataclass(frozen=True)
class SuiteOptions:
    """How a suite is run, whatever its kind: sampling, repeats, modes, progress and the cases chosen."""

    temperature: float = 0.0
    max_tokens: int = 512
    repeat: int = 1
    modes: tuple[str, ...] = MODES
    progress: Progress | None = None
    case_ids: Sequence[str] | None = field(default=None)


class SuiteRunner(Protocol):
    """One kind of smoke suite (see the module doc)."""

    def handles(self, suite: str) -> bool: ...

    def check(self, suite: str, case_ids: Sequence[str] | None) -> None: ...

    def run(self, base_url: str, model: str, suite: str, results: ResultsDir | None,
            options: SuiteOptions) -> SuiteResult: ...
