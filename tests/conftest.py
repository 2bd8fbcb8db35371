"""Test-wide isolation: results never land in the working tree; `@pytest.mark.needs(cmd, …)` for system commands."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/system_deps.py, for every tier

# `@pytest.mark.needs("unshare", "ip")`: those commands on PATH, else fail under `make test` (skip elsewhere)
from quiet_host import QuietHost
from servepack import store
from servepack.host import contention
from system_deps import pytest_runtest_setup  # noqa: F401

# a test or fixture that leaves a servepack-* sampler thread running fails (tests/thread_guard.py)
pytest_plugins = ["thread_guard"]

REAL_PROC_READER = contention.ProcReader

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


@pytest.fixture(autouse=True)
def _own_secrets() -> Iterator[None]:
    """The secret values a test registers (`store.register_secrets`, through a session or directly) are forgotten
    after it: every error servepack shows loses them by value (`redact.scrub_shown`), so a value one test
    registered ("short") would otherwise change the messages of the tests after it."""
    before = set(store._SECRETS)
    yield
    with store._SECRETS_LOCK:
        store._SECRETS.intersection_update(before)


@pytest.fixture(scope="session", autouse=True)
def _quiet_host_by_default() -> Iterator[None]:
    """Contention watches built without a reader read a quiet host (module fixtures included), unless the test
    asks for the machine's own (`real_host`, or a `cpu_hog` beside it): contended samples are set aside and
    replaced, so on a shared test machine every bench would otherwise sample more, wait for quiet and vary in its
    counts."""
    mp = pytest.MonkeyPatch()
    mp.setattr(contention, "ProcReader", QuietHost)
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _real_host_when_asked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if {"real_host", "cpu_hog"} & set(request.fixturenames):
        monkeypatch.setattr(contention, "ProcReader", REAL_PROC_READER)


@pytest.fixture
def real_host() -> None:
    """Contention watches read this machine's /proc (see `_quiet_host_by_default`)."""


@pytest.fixture
def terminal_sigint() -> Iterator[None]:
    """SIGINT as an interactive terminal's process has it. A test run started in the background by a
    non-interactive shell (`make test &`, a CI runner, nohup) inherits SIGINT ignored; Python then installs no
    handler, and `_thread.interrupt_main()` does nothing at all (a Ctrl-C test would fail "DID NOT RAISE
    KeyboardInterrupt", with the sweep running to its end)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
