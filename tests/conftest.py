"""Test-wide isolation: results never land in the working tree."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_results(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    results = tmp_path_factory.mktemp("results")
    monkeypatch.setenv("SERVEPACK_RESULTS_DIR", str(results))
    return results
