"""Write a tuned configuration as a new preset into a *user* pack file; the shipped packs are never edited.

A new file starts as a copy of the source pack's text; an existing one must be a pack of the same id. The preset is
appended as its own TOML tables (nothing already in the file is rewritten), the result is validated as a pack, and
the file is replaced atomically.

A pack file never receives a secret: when the tuned preset would carry a flag whose value is a key (`api-key`,
`hf-token`, ...), or a new file would copy a source pack whose presets hold one, `--write-pack` is refused before
anything is tuned, naming the fix: keep the key in a file and give the preset `api-key-file = "PATH"` (a path is
written, never a key).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from servepack import redact
from servepack.errors import PackError, UsageError
from servepack.packs import LoadedPack, load_pack_file, shipped_pack_paths
from servepack.packs.flag_policy import OPT_IN, READ_FILES
from servepack.packs.loader import MAX_PACK_BYTES
from servepack.packs.schema import FlagValue
from servepack.safepath import kind_at, read_bounded


def _is_shipped(path: Path) -> bool:
    shipped_dirs = {p.resolve().parent for p in shipped_pack_paths().values()}
    return path.resolve().parent in shipped_dirs


SECRET_FIX = (f'keep the key in a file and give the preset `api-key-file = "PATH"` instead (the path is written, '
              f"never a key; it needs `{OPT_IN} {READ_FILES.name}`), or leave the key out, then tune again")


def holds_secret(name: str, value: FlagValue) -> bool:
    """A flag whose value is itself a secret (`api-key = "…"`, by `redact.holds_secret`: a switch is none);
    one naming a file that holds it (`api-key-file`, `ssl-key-file`) carries a path, which may be written."""
    norm = name.lstrip("-").lower().replace("_", "-")
    return redact.holds_secret(norm, value) and not norm.endswith("-file")


def secret_problem(target: Path, source: LoadedPack, flags: Mapping[str, FlagValue]) -> str | None:
    """One line refusing `--write-pack` when the file would receive a secret, or None."""
    for name, value in flags.items():
        if holds_secret(name, value):
            return (f"--write-pack {target}: the tuned preset would copy flag {name!r}, a secret, into the pack file, "
                    f"and servepack never writes a secret into a pack: {SECRET_FIX}")
    if not target.exists():
        for preset_name, preset in source.pack.presets.items():
            held = next((n for n, v in preset.flags.items() if holds_secret(n, v)), None)
            if held is not None:
                return (f"--write-pack {target}: a new pack file starts as a copy of {source.path}, whose preset "
                        f"{preset_name!r} holds a secret in flag {held!r}, and servepack never writes a secret into "
                        f"a pack: {SECRET_FIX}")
    return None


def check_target(target: Path, source: LoadedPack, flags: Mapping[str, FlagValue] | None = None) -> None:
    """Refuse a shipped pack, a pack of another id, a directory, a place where the model path would break, or a
    write that would put a secret into the file (`flags`: the preset to be written, its base's before tuning)."""
    if (secret := secret_problem(target, source, flags or {})) is not None:
        raise UsageError(secret)
    if _is_shipped(target):
        raise UsageError(f"--write-pack {target}: that is a shipped pack; give a file of your own (e.g. my-pack.toml)")
    if target.exists():
        if not target.is_file():
            raise UsageError(f"--write-pack {target}: not a regular file ({kind_at(target) or 'unreadable'}); give "
                             "a pack file of your own, or a new file's path")
        try:
            mine = load_pack_file(target)
        except PackError as exc:
            raise UsageError(f"--write-pack {target}: exists and is not a valid pack ({exc})") from None
        if mine.pack.id != source.pack.id:
            raise UsageError(f"--write-pack {target}: a pack of {mine.pack.id!r}, not {source.pack.id!r}; "
                             "give a new file or one of the same pack")
        return
    if not target.parent.is_dir():
        raise UsageError(f"--write-pack {target}: directory {target.parent} does not exist")
    src = source.pack.model.source
    if src.kind == "file" and not Path(src.path).expanduser().is_absolute() \
            and target.resolve().parent != source.path.parent:
        raise UsageError(f"--write-pack {target}: the pack's model path {src.path!r} is relative to "
                         f"{source.path.parent}; write the user pack into that directory")


def _toml_value(value: FlagValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value, ensure_ascii=True)


def preset_toml(name: str, description: str, flags: Mapping[str, FlagValue]) -> str:
    lines = [f"\n[presets.{name}]", f"description = {json.dumps(description, ensure_ascii=True)}",
             'role = "candidate"', f"[presets.{name}.flags]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in flags.items()]
    return "\n".join(lines) + "\n"


def free_name(existing: set[str], wanted: str) -> str:
    if wanted not in existing:
        return wanted
    n = 2
    while f"{wanted}-{n}" in existing:
        n += 1
    return f"{wanted}-{n}"


def write_preset(target: Path, source: LoadedPack, wanted: str, description: str,
                 flags: Mapping[str, FlagValue]) -> str:
    """Append the preset (under a free name) to the user pack, validate, replace atomically; the name used."""
    check_target(target, source, flags)
    base = target if target.exists() else source.path
    base_text = read_bounded(base, MAX_PACK_BYTES, "give the path of a pack .toml file", error=PackError).decode()
    existing = set(load_pack_file(target).pack.presets if target.exists() else source.pack.presets)
    name = free_name(existing, wanted)
    text = base_text.rstrip("\n") + "\n" + preset_toml(name, description, flags)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".toml", dir=target.resolve().parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            load_pack_file(Path(tmp))
        except PackError as exc:
            raise UsageError(f"--write-pack {target}: the tuned preset would not validate ({exc})") from None
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return name
