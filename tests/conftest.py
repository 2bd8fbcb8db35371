"""Test-wide isolation: results never land in the working tree; `@pytest.mark.needs(cmd, …)` for system commands."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/system_deps.py, for every tier

# `@pytest.mark.needs("unshare", "ip")`: those commands on PATH, else fail under `make test` (skip elsewhere)
from system_deps import pytest_runtest_setup  # noqa: F401

STANDIN_ENV = ("FAKE_MODE", "FAKE_RPC_MODE", "FAKE_RPC_PROTO", "SURFACE_SCALE", "SURFACE_HOG_FILE", "SURFACE_SEED",
               "SURFACE_LAUNCH_NOISE", "SURFACE_NOISE", "VLLM_STANDIN_MODE", "VLLM_STANDIN_RECORD", "FAKE_EXIT",
               "FAKE_FREEZE")


@pytest.fixture(autouse=True)
def _isolated_results(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    results = tmp_path_factory.mktemp("results")
    monkeypatch.setenv("SERVEPACK_RESULTS_DIR", str(results))
    # The stand-in servers (servepack.testing) are scripted through these: a server gets its environment from an
    # allow-list (engine.environ), so they pass by name, as a user passes a variable their engine needs.
    monkeypatch.setenv("SERVEPACK_SERVER_ENV", " ".join(STANDIN_ENV))
    return results
