"""Test-wide isolation: results never land in the working tree; `@pytest.mark.needs(cmd, …)` for system commands."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/system_deps.py, for every tier

# `@pytest.mark.needs("unshare", "ip")`: those commands on PATH, else fail under `make test` (skip elsewhere)
from system_deps import pytest_runtest_setup  # noqa: F401


@pytest.fixture(autouse=True)
def _isolated_results(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    results = tmp_path_factory.mktemp("results")
    monkeypatch.setenv("SERVEPACK_RESULTS_DIR", str(results))
    return results
