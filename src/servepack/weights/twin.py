"""Shape twins: a real GGUF header followed by random tensor bytes — for speed only, never quality.

A twin is marked by a sidecar `<file>.twin.json` written beside it; every receipt reads that mark.
"""

from __future__ import annotations

import json
from pathlib import Path

TWIN_SUFFIX = ".twin.json"


def twin_marker(path: Path) -> Path:
    return path.with_name(path.name + TWIN_SUFFIX)


def is_twin(path: Path) -> bool:
    """True when `path` carries the shape-twin mark."""
    marker = twin_marker(path)
    if not marker.is_file():
        return False
    try:
        return bool(json.loads(marker.read_text()).get("random_weights", True))
    except (OSError, ValueError):
        return True  # an unreadable mark still marks: never let a twin pass for real weights
