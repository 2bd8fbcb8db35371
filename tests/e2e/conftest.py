"""e2e fixtures: one real llama-server with the embedded model, shared by the e2e tests and gone after them.

Package scope (this directory is a package for it): the server and the session's memory sampler are torn down
after the last e2e test, not at the end of the run, so they never sample beside the integration and unit tests
that come after (tests/thread_guard.py fails a fixture that keeps a servepack-* thread running past its tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from servepack.engine.base import Endpoint
from servepack.plan import RunOptions, plan_run
from servepack.session import Session, open_session


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="package")
def embedded_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """A session of the embedded default pack (default preset), torn down after the last e2e test."""
    out: Path = tmp_path_factory.mktemp("embedded-session")
    with open_session(plan_run(None, options=RunOptions(out=out / "run", kind="e2e"))) as session:
        yield session


@pytest.fixture(scope="package")
def embedded_server(embedded_session: Session) -> Endpoint:
    """The running llama-server's endpoint: `.base_url` (no /v1), `.model` (alias), `.pid`, `.check_alive()`."""
    embedded_session.endpoint.check_alive()
    return embedded_session.endpoint
