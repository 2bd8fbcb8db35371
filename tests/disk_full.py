"""A disk that fills up, for unit tests: every file opened for writing through `os.fdopen` takes `room` bytes
more, then fails with ENOSPC, as the kernel's write(2) does. Reads are untouched. No mount, no root."""

from __future__ import annotations

import errno
import io
import os
from typing import Any

import pytest


def fill_disk(monkeypatch: pytest.MonkeyPatch, room: int = 0) -> list[str]:
    """From now on (until the test ends) writes through `os.fdopen` fail once `room` bytes are written.
    Returns the list that collects the path of each file whose write was refused, to show the failure came
    from here and which file it hit."""
    refused: list[str] = []
    real_fdopen = os.fdopen
    left = [room]

    class _Full(io.FileIO):
        path = ""

        def write(self, b: Any) -> int:
            data = memoryview(b).cast("B")
            if left[0] <= 0:
                refused.append(self.path)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            n = min(len(data), left[0])
            left[0] -= n
            return super().write(data[:n])

    def fdopen(fd: int, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if not any(c in mode for c in "wax+"):
            return real_fdopen(fd, mode, *args, **kwargs)
        raw = _Full(fd, "w")
        raw.path = os.readlink(f"/proc/self/fd/{fd}")
        buffered = io.BufferedWriter(raw)
        return buffered if "b" in mode else io.TextIOWrapper(buffered, encoding=kwargs.get("encoding"))

    monkeypatch.setattr(os, "fdopen", fdopen)
    return refused
