"""One periodic sampler thread for the host watchers (memory, contention)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

JOIN_S = 5.0  # how long stop() waits for a tick in progress to finish


class Ticker:
    """Call `tick` every `interval_s` from a daemon thread until `stop()`.

    Deadlines sit on a fixed grid, so the time a tick takes does not slow the rate below 1/interval. With `quiet`,
    an exception from a tick in the thread is dropped (a failed reading must never stop a measurement); the first
    reading, taken in the caller by `start(first=True)`, still raises.
    """

    def __init__(self, name: str, interval_s: float, tick: Callable[[], object], *, quiet: bool = False) -> None:
        self.name, self.interval_s, self.tick, self.quiet = name, interval_s, tick, quiet
        self._stop = threading.Event()
        self._done = threading.Event()  # set as the thread ends
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, *, first: bool = False) -> None:
        """Start the thread (once); with `first`, take one reading now, in the caller, before it."""
        if self._thread is None:
            if first:
                self.tick()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Tell the thread to stop and wait (up to JOIN_S) until it has ended: a tick in progress finishes first.
        A Ctrl-C during the wait still waits for the thread before the interrupt goes on."""
        try:
            self._stop.set()
            self._await_end()
        except BaseException:
            self._stop.set()
            self._await_end()
            raise

    def _await_end(self) -> None:
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return
        # An Event first, not Thread.join alone: a join a Ctrl-C interrupts marks the thread stopped while it still
        # runs (Python 3.11), and every later join returns at once.
        self._done.wait(JOIN_S)
        thread.join(JOIN_S)

    def _run(self) -> None:
        try:
            due = time.monotonic()
            while True:
                due += self.interval_s
                if self._stop.wait(max(due - time.monotonic(), 0.0)):
                    return
                if self.quiet:
                    with contextlib.suppress(Exception):
                        self.tick()
                else:
                    self.tick()
        finally:
            self._done.set()
