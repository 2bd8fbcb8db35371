"""Progress callbacks, one type each (the one copy): `Progress` takes a line to show, `ByteProgress` bytes done and
the total (hashing, downloads); `quiet`, the callback that says nothing, for a job run with no one to tell."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]
ByteProgress = Callable[[int, int], None]


def quiet(_: str) -> None:
    """Take a progress line and drop it."""
