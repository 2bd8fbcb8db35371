"""Packs: the manifest schema, the loader and the packs that ship inside servepack.

Modules:

- `flag_policy`: The one policy for engine flags that run code, serve, read or write host files, or reach other
  hosts.
- `loader`: Find, read and validate packs; turn pydantic errors into one line naming file, field and fix.
- `schema`: The pack manifest: one model pin, one engine pin, one hardware target, presets, bench plan, claims.
"""

from servepack.packs.loader import DEFAULT_PACK_ID, LoadedPack, load_pack, load_pack_file, shipped_pack_paths
from servepack.packs.schema import Pack, Preset

__all__ = ["DEFAULT_PACK_ID", "LoadedPack", "Pack", "Preset", "load_pack", "load_pack_file", "shipped_pack_paths"]
