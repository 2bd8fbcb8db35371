"""Fixtures for the reproduce tests (helpers live in reproduce_fixtures.py: conftest modules share one name)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from reproduce_fixtures import FakeRecord


@pytest.fixture(scope="module")
def fake_record(tmp_path_factory: pytest.TempPathFactory) -> FakeRecord:
    return FakeRecord(tmp_path_factory.mktemp("fake-record"))
