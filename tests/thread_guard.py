"""A test that leaves a servepack-* thread running fails (tests/conftest.py loads this as a plugin).

servepack's samplers and watches (host.memory, host.contention, host.energy, bench.observer) each tick in a thread
named `servepack-…`. One left running after its test keeps sampling, writing and fsyncing beside every later test
(it once made a unit test count an fsync that was not its own). So:

- a thread started during a test (by the test or its function-scoped fixtures) must have ended when the test's
  teardown is done; it is given GRACE_S to finish its last tick, else the teardown errors naming it;
- a thread started while a wider fixture (module, package, session) was set up belongs to that fixture: it must end
  when the fixture is torn down, and the fixture must be torn down before a test that cannot see it runs (a
  session-scoped fixture in tests/e2e/conftest.py would otherwise sample through the whole unit suite).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Generator, Iterable

import pytest

PREFIX = "servepack-"
# seconds a stopped thread gets to finish its last tick (tests of this guard shorten it)
GRACE_S = float(os.environ.get("SERVEPACK_TEST_THREAD_GRACE_S", "5"))

_BEFORE = pytest.StashKey[frozenset[threading.Thread]]()
_owners: dict[threading.Thread, pytest.FixtureDef[object]] = {}
_reported: set[threading.Thread] = set()
_pending: list[str] = []


class LeftRunning(AssertionError):
    """A servepack-* thread outlived what started it."""


def servepack_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(PREFIX) and t.is_alive()}


def still_running(threads: Iterable[threading.Thread], grace_s: float = GRACE_S) -> list[threading.Thread]:
    """The threads still alive after waiting up to `grace_s` in all for them to end."""
    deadline = time.monotonic() + grace_s
    left = []
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            left.append(t)
    return left


def _names(threads: Iterable[threading.Thread]) -> str:
    return ", ".join(sorted(t.name for t in threads))


def _visible(fixturedef: pytest.FixtureDef[object], item: pytest.Item) -> bool:
    """Whether `item` can request the fixture: it is defined at a node above the item (or in a plugin)."""
    base = fixturedef.baseid
    return not base or item.nodeid == base or item.nodeid.startswith((f"{base}/", f"{base}::"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    item.stash[_BEFORE] = frozenset(servepack_threads())
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[object],
                         request: pytest.FixtureRequest) -> Generator[None, object, object]:
    if fixturedef.scope == "function":
        return (yield)
    before = servepack_threads()
    try:
        return (yield)
    finally:
        for t in servepack_threads() - before:
            _owners[t] = fixturedef


@pytest.hookimpl(wrapper=True)
def pytest_fixture_post_finalizer(fixturedef: pytest.FixtureDef[object],
                                  request: pytest.FixtureRequest) -> Generator[None, object, object]:
    try:
        return (yield)
    finally:
        # Never raised here: pytest clears the fixture's cached value after this hook; the teardown reports it.
        mine = [t for t, f in _owners.items() if f is fixturedef]
        for t in mine:
            del _owners[t]
        if left := still_running(mine):
            _pending.append(f"fixture {fixturedef.argname!r} ({fixturedef.scope} scope) was torn down, and its "
                            f"thread(s) {_names(left)} still run: its teardown must stop and join them")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    try:
        result = yield
    except BaseException:
        _pending.clear()
        raise
    problems, _pending[:] = list(_pending), []
    for t in [t for t in _owners if not t.is_alive()]:
        del _owners[t]
    started = servepack_threads() - item.stash.get(_BEFORE, frozenset()) - set(_owners)
    if left := still_running(started):
        problems.append(f"{item.nodeid} left {_names(left)} running after its teardown (each sampler or watch "
                        f"it starts must be stopped and joined, on every path)")
    if nextitem is not None:
        for t, f in list(_owners.items()):
            if t not in _reported and not _visible(f, nextitem):
                _reported.add(t)
                problems.append(f"fixture {f.argname!r} ({f.scope} scope, defined at {f.baseid or 'the root'}) "
                                f"keeps {t.name} running past the last test that can use it, into "
                                f"{nextitem.nodeid}: give it the scope of the tests that use it")
    if problems:
        raise LeftRunning("; ".join(problems))
    return result
