"""Helpers for the reproduce tests: a record exported from one bench against the shared fake server."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "core"))

from core_fixtures import make_pack, write_fake_server_bin

from servepack.pipeline.bench import bench_pack
from servepack.registry.export import export_records


def _quiet(_: str) -> None:
    pass


class FakeRecord:
    """A pack, the fake llama-server, and the registry record exported from one bench of it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pack = make_pack(root)
        self.server_bin = write_fake_server_bin(root)
        _, run = bench_pack(str(self.pack), None, out=root / "original-run", progress=_quiet,
                            server_bin=self.server_bin, samples=5, gen_tokens=32)
        self.recipe, self.sweep = export_records(run, root / "export")
