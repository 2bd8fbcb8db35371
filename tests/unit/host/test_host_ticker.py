"""host.ticker: the one sampler thread of the host watchers; stop() joins it, mid-tick too."""

from __future__ import annotations

import threading
import time

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
