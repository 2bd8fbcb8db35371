"""Find, read and validate packs; turn pydantic errors into one line naming file, field and fix."""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servepack.errors import PackError, UsageError
from servepack.packs.schema import Pack
from servepack.safepath import names_something, read_bounded

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_PACK_ID = "qwen2.5-coder-0.5b-cpu"
# A pack is a page of TOML; anything far larger is not one (and /dev/zero would never end).
MAX_PACK_BYTES = 1 << 20


@dataclass(frozen=True)
class LoadedPack:
    """A validated pack with where it came from and the sha256 of its bytes."""

    pack: Pack
    path: Path
    sha256: str
    shipped: bool


def shipped_pack_paths() -> dict[str, Path]:
    """Pack id (file stem) → path, for the packs inside the package."""
    data = resources.files("servepack.packs") / "data"
    return {Path(p.name).stem: Path(str(p)) for p in data.iterdir() if p.name.endswith(".toml")}


def format_validation_error(path: Path, err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(part) for part in first["loc"] if not str(part).startswith("function-"))
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    where = f"field {loc}" if loc else "pack"
    return f"{path}: {where}: {first['msg']}{more}"


def parse_toml(raw: bytes, label: str, what: str, *, error: type[UsageError] = UsageError) -> dict[str, Any]:
    """The TOML document in `raw` (a pack, a tune space: user files read whole), or `error` naming `label` and why
    not: not UTF-8, not TOML, or nested deeper than the reader's recursion (RecursionError, exit 70, before)."""
    try:
        doc: dict[str, Any] = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise error(f"{label}: not UTF-8 text (byte {exc.start}); {what} is a UTF-8 TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{label}: not valid TOML: {exc}") from None
    except RecursionError:
        raise error(f"{label}: TOML nested too deeply to read; {what} nests a few tables, fix the file") from None
    return doc


def load_pack_file(path: Path, *, shipped: bool = False) -> LoadedPack:
    """Read and validate one pack file."""
    raw = read_bounded(path, MAX_PACK_BYTES, "not a pack file, check the path", error=PackError)
    data = parse_toml(raw, str(path), "a pack", error=PackError)
    try:
        pack = Pack.model_validate(data)
    except ValidationError as exc:
        raise PackError(format_validation_error(path, exc)) from None
    except RecursionError:
        raise PackError(f"{path}: values nested too deeply to validate; fix the file") from None
    return LoadedPack(pack=pack, path=path.resolve(), sha256=hashlib.sha256(raw).hexdigest(), shipped=shipped)


def load_pack(ref: str | None) -> LoadedPack:
    """A pack by shipped id or by file path; None means the embedded default."""
    ref = ref or DEFAULT_PACK_ID
    shipped = shipped_pack_paths()
    if ref in shipped:
        return load_pack_file(shipped[ref], shipped=True)
    path = Path(ref).expanduser()
    if path.suffix == ".toml" or names_something(path):
        return load_pack_file(path)
    raise PackError(f"no pack {ref!r}: give a pack file path or one of {sorted(shipped)} (servepack packs)")
