"""Packs: the manifest schema, the loader and the packs that ship inside servepack.

Modules:

- `flag_policy`: The one policy for engine flags that run code, serve, read or write host files, or reach other
  hosts.
- `limits`: The bounds every numeric pack field and command-line option shares, without the pack schema's models.
- `loader`: Find, read and validate packs; turn pydantic errors into one line naming file, field and fix.
- `schema`: The pack manifest: one model pin, one engine pin, one hardware target, presets, bench plan, claims.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servepack.packs.loader import DEFAULT_PACK_ID, LoadedPack, load_pack, load_pack_file, shipped_pack_paths
    from servepack.packs.schema import Pack, Preset

__all__ = ["DEFAULT_PACK_ID", "LoadedPack", "Pack", "Preset", "load_pack", "load_pack_file", "shipped_pack_paths"]

# The public names are imported when first used (PEP 562), so importing `packs.flag_policy` (the CLI's option
# checks) does not build the pydantic schema: `servepack --version` and `--help` start without it.
_HOME = {"Pack": "schema", "Preset": "schema"} | {name: "loader" for name in __all__ if name not in {"Pack", "Preset"}}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'servepack.packs' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"servepack.packs.{_HOME[name]}"), name)
    globals()[name] = value
    return value
