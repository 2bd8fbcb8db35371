"""Extra files a preset needs beside the model (a speculative-decoding draft), found where `pull` put them."""

from __future__ import annotations

from pathlib import Path

from servepack.errors import EngineError
from servepack.packs import LoadedPack
from servepack.packs.schema import FileSource, HfSource, Preset
from servepack.weights.resolve import hf_expected_path


def extra_files(loaded: LoadedPack, preset: Preset, local_dir: Path | None) -> dict[str, Path]:
    """name → path of every model.extra file the preset requires; an error names the pull that fetches it."""
    out = {}
    for extra in loaded.pack.model.extra:
        if extra.name in preset.requires:
            src = extra.source
            if isinstance(src, HfSource):
                path = hf_expected_path(src, local_dir)
            elif isinstance(src, FileSource):
                path = Path(src.path).expanduser()
                path = path if path.is_absolute() else loaded.path.parent / path
            else:
                raise EngineError(f"model.extra {extra.name}: only hf and file sources are supported for extras")
            if not path.is_file():
                raise EngineError(f"preset needs {extra.file} at {path}; run `servepack pull PACK --with-draft`")
            out[extra.name] = path
    return out
