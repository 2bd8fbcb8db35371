"""The scripted fake server lives in benchmarks/ (shared with the fidelity scripts); make it importable."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
