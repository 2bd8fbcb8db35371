"""host.ticker's first reading and quiet ticks, the one home of what the contention watch, the point watch and the
memory sampler each did on their own: a first reading in the caller (its failure the caller's), then a thread whose
failed readings never stop it."""

from __future__ import annotations

import threading
import time

import pytest

from servepack.host.ticker import Ticker


def _wait_for(cond: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the ticker did not tick"
        time.sleep(0.005)


def test_the_first_reading_is_taken_in_the_caller_then_the_thread_ticks() -> None:
    callers: list[int] = []
    t = Ticker("servepack-test-first", 0.01, lambda: callers.append(threading.get_ident()))
    t.start(first=True)
    try:
        assert callers[0] == threading.get_ident()  # taken before start() returned, in this thread
        _wait_for(lambda: len(callers) >= 3)
        assert set(callers[1:]) != {threading.get_ident()}  # the rest come from the ticker's thread
        n = len(callers)
        t.start(first=True)  # started already: no second first reading, no second thread
        assert threading.get_ident() not in callers[n:]
    finally:
        t.stop()


def test_a_failed_first_reading_is_the_callers_and_starts_no_thread() -> None:
    def broken() -> None:
        raise OSError("cannot read /proc/stat")

    t = Ticker("servepack-test-first", 0.01, broken, quiet=True)
    with pytest.raises(OSError, match="/proc/stat"):
        t.start(first=True)
    assert not t.started


def test_quiet_ticks_that_fail_never_stop_the_thread() -> None:
    calls = [0]

    def flaky() -> None:
        calls[0] += 1
        if calls[0] % 2:
            raise RuntimeError("a reading failed")

    t = Ticker("servepack-test-quiet", 0.005, flaky, quiet=True)
    t.start()  # no first reading: the thread's first tick fails, and the next, every other one
    try:
        _wait_for(lambda: calls[0] >= 6)
        assert t._thread is not None and t._thread.is_alive()
    finally:
        t.stop()
    assert t._thread is not None and not t._thread.is_alive()
