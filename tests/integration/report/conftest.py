"""Helpers shared with other test areas: the fake llama-server binary and tiny pack (core), rich runs (report)."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
for sub in ("integration/core", "unit/report", "unit/records"):
    if str(TESTS / sub) not in sys.path:
        sys.path.insert(0, str(TESTS / sub))
