"""Fixtures for the tune tests (helpers live in tune_fixtures.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.append(str(Path(__file__).parents[1] / "core"))  # core_fixtures: helpers the test folders share

from tune_fixtures import make_tune_pack, write_surface_bin


@pytest.fixture(autouse=True)
def _fast_surface(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SURFACE_SCALE", "4")  # 4× the surface's speeds: the same optimum, shorter trials
    monkeypatch.setenv("SERVEPACK_HEALTH_TIMEOUT_S", "60")


@pytest.fixture
def surface_bin(tmp_path: Path) -> Path:
    return write_surface_bin(tmp_path)


@pytest.fixture
def tune_pack(tmp_path: Path) -> Path:
    return make_tune_pack(tmp_path)
