"""`quiet`: the progress callback that says nothing, for a job run with no one to tell (the one copy)."""

from __future__ import annotations


def quiet(_: str) -> None:
    """Take a progress line and drop it."""
