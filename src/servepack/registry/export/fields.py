"""The field forms an export writes, shared by its builders: ids (slug), UTC times with Z, fact entries, the
engine version, whole numbers read from flags."""

from __future__ import annotations

import re
from typing import Any

GIB = 1 << 30


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def zulu(ts: str) -> str:
    """A UTC timestamp written with Z, as the registry requires (never +00:00)."""
    return ts[: -len("+00:00")] + "Z" if ts.endswith("+00:00") else ts


def fact(state: str, provenance: dict[str, Any], reason: str | None = None, note: str | None = None
         ) -> dict[str, Any]:
    out: dict[str, Any] = {"state": state, "provenance": provenance}
    if reason:
        out["reason"] = reason
    if note:
        out["note"] = note
    return out


def engine_version(text: str) -> str | None:
    """The engine's version from its `--version` text (the `version:` line, else the first line), or None."""
    m = re.search(r"version:\s*(.+)", text)
    return m.group(1).strip() if m else (text.strip().splitlines()[0] if text.strip() else None)


def whole_number(v: object) -> int | None:
    """A flag's value as a whole number (8192 or the text 8192), else None."""
    return int(v) if isinstance(v, int | float | str) and not isinstance(v, bool) and str(v).lstrip("-").isdigit() \
        else None
