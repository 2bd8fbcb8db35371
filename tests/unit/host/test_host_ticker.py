"""host.ticker: the one sampler thread of the host watchers; stop() joins it, mid-tick too."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from servepack.host.ticker import Ticker


def test_stop_mid_tick_waits_for_the_tick_and_joins_the_thread() -> None:
    inside, ticks = threading.Event(), []

    def slow_tick() -> None:
        inside.set()
        time.sleep(0.3)
        ticks.append(time.monotonic())

    t = Ticker("servepack-test-ticker", 0.01, slow_tick)
    t.start()
    assert inside.wait(5)
    t.stop()
    assert t._thread is not None and not t._thread.is_alive()
    n = len(ticks)
    assert n >= 1  # the tick in progress finished
    time.sleep(0.1)
    assert len(ticks) == n  # and no other began


def test_stop_before_start_and_start_after_stop_leave_no_thread() -> None:
    t = Ticker("servepack-test-ticker", 0.01, lambda: None)
    t.stop()
    assert not t.started
    t.start()  # stopped already: the thread ends at its first wait
    assert t._thread is not None
    t._thread.join(1)
    assert not t._thread.is_alive()


def test_a_ctrl_c_during_stop_still_joins_the_thread_before_it_goes_on() -> None:
    """A second Ctrl-C while a session's finally joins its sampler: the interrupt goes on, the thread joined first."""
    inside, release = threading.Event(), threading.Event()

    def stuck_tick() -> None:
        inside.set()
        release.wait(5)

    def ctrl_c() -> None:  # SIGINT to the main thread while it joins, as a terminal delivers it; the tick ends after
        while not t._stop.is_set():
            time.sleep(0.005)
        time.sleep(0.1)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        time.sleep(0.3)
        release.set()

    t = Ticker("servepack-test-ticker", 0.01, stuck_tick)
    t.start()
    assert inside.wait(5)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        presser = threading.Thread(target=ctrl_c)
        presser.start()
        with pytest.raises(KeyboardInterrupt):
            t.stop()
        assert t._thread is not None and not t._thread.is_alive()
        assert release.is_set()  # the stop waited for the tick in progress, not merely for the interrupt
    finally:
        release.set()
        presser.join(5)
        signal.signal(signal.SIGINT, old)
