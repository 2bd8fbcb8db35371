"""Packs: the manifest schema, the loader and the packs that ship inside servepack."""

from servepack.packs.loader import DEFAULT_PACK_ID, LoadedPack, load_pack, load_pack_file, shipped_pack_paths
from servepack.packs.schema import Pack, Preset

__all__ = ["DEFAULT_PACK_ID", "LoadedPack", "Pack", "Preset", "load_pack", "load_pack_file", "shipped_pack_paths"]
