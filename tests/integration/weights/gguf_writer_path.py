"""The unit tier's GGUF writer, for integration tests of weights."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "unit" / "core"))

from gguf_writer import write_gguf

__all__ = ["write_gguf"]
