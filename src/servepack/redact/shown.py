"""What servepack shows and rewrites (`servepack.redact`'s rule: "What is shown", "By value, from free text"): an error
on the terminal or in a page (`scrub_shown`: the values registered in this process, then by name), a pack as `pack
show` prints it (`redact_pack`, `redact_pack_text`), and an engine's log rewritten in place (`scrub_file`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from servepack.redact.names import MIN_SCRUB_LEN, redact_flags, secret_values
from servepack.redact.text import apply_spans, redact_text, scrub_text, text_spans
from servepack.safepath import Replacing
from servepack.store import REDACTED, registered_secrets

if TYPE_CHECKING:  # a type only: scrubbing an error or a record's text needs no pack schema
    from servepack.packs.schema import Pack


def scrub_shown(text: str, *, by_name: bool = True) -> str:
    """An error as servepack shows it on the terminal or in a page (an internal error's message, a `--debug`
    traceback, a report section that could not be drawn): each secret value registered in this process
    (`store.registered_secrets`, at least MIN_SCRUB_LEN long) removed, then (`by_name`) every value a name marks.
    servepack's own error messages (`by_name=False`) lose only the registered values: they name flags themselves."""
    for value in registered_secrets(MIN_SCRUB_LEN):
        text = text.replace(value, REDACTED)
    return redact_text(text)[0] if by_name else text


def redact_pack(pack: Pack) -> Pack:
    """`pack` as `pack show` shows it: every preset's flags through `redact_flags` (numbers too; switches kept)."""
    presets = {name: p.model_copy(update={"flags": redact_flags(p.flags)}) for name, p in pack.presets.items()}
    return pack.model_copy(update={"presets": presets})


def redact_pack_text(text: str, pack: Pack) -> str:
    """A pack file's text as `pack show` prints it: each preset's secret value (at least MIN_SCRUB_LEN long, where it
    stands: a multi-line string), then every value a name marks (`api-key = "…"`, `{ hf-token = '…' }`)."""
    values = {v for p in pack.presets.values()
              for v in secret_values(["pack", *(f"--{k}={v}" for k, v in p.flags.items())], read_key_files=False)}
    return scrub_text(text, sorted(values, key=lambda v: (-len(v), v)))


def _scrub_bytes(raw: bytes, secrets: list[str], mask: bool) -> bytes:
    """`raw` with secrets replaced by REDACTED, or (`mask`) by as many `*` (the same length, for a rewrite in place)."""
    clean = raw
    for value in secrets:
        v = value.encode()
        clean = clean.replace(v, b"*" * len(v) if mask else REDACTED.encode())
    text = clean.decode("utf-8", errors="surrogateescape")  # any bytes survive the round trip
    return apply_spans(text, text_spans(text), mask).encode("utf-8", errors="surrogateescape")


def scrub_file(path: Path, secrets: list[str]) -> bool:
    """Rewrite `path` (an engine's log, before the receipt covers it) with secrets replaced, by value and by name;
    True if it changed."""
    if not path.is_file() or path.is_symlink():
        return False
    try:
        raw = path.read_bytes()
    except OSError:
        return False
    clean = _scrub_bytes(raw, secrets, mask=False)
    if clean == raw:
        return False
    try:
        with Replacing(path, mode=0o600) as fh:  # the one atomic replace: no temp file left, whatever fails
            fh.write(clean)
    except OSError:
        # No room for a copy (disk full): mask each secret in place, byte for byte, which needs no space.
        with contextlib.suppress(OSError), path.open("r+b") as fh:
            fh.write(_scrub_bytes(raw, secrets, mask=True))
    return True
