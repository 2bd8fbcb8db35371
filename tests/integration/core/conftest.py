"""Fixtures for lifecycle tests (helpers live in core_fixtures.py: conftest modules share one import name)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from core_fixtures import make_pack, write_fake_server_bin


@pytest.fixture
def fake_server_bin(tmp_path: Path) -> Path:
    return write_fake_server_bin(tmp_path)


@pytest.fixture
def tiny_pack(tmp_path: Path) -> Path:
    return make_pack(tmp_path)
