"""Secrets in preset flags and argv never reach a record: values are replaced, the fact one was set is kept.

A flag is secret-bearing when a dash-separated part of its name is `key`, `api-key`, `token`, `secret`,
`password`, `auth`, `credential`, ... (`--api-key`, `--api-key-file`, `--ssl-key-file`, `--hf-token`). Its value
becomes `REDACTED` in receipt.json (preset flags, server argv, every process's argv) and therefore in everything
rendered from the receipt (MEASURED.md, registry records). Text written by the engine itself (its log) and error
messages are scrubbed of the secret values, including the keys an `--api-key-file` holds.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from servepack.errors import UsageError
from servepack.packs.flag_policy import is_secret_flag as is_secret_flag
from servepack.safepath import read_bounded
from servepack.store import REDACTED

# Values shorter than this are not scrubbed from free text (a one-character "secret" would wreck a log).
MIN_SCRUB_LEN = 4
MAX_KEY_FILE_BYTES = 1 << 16
V = TypeVar("V")


def _norm(name: str) -> str:
    return name.lstrip("-").lower().replace("_", "-")


def redact_flags(flags: Mapping[str, V]) -> dict[str, V | str]:
    """Preset flags with every secret value replaced by REDACTED; booleans (set or not) are kept as they are."""
    return {k: (REDACTED if is_secret_flag(k) and not isinstance(v, bool) else v) for k, v in flags.items()}


def _secret_positions(argv: list[str]) -> Iterable[tuple[int, str | None]]:
    """(index, flag prefix) of each secret value in argv: prefix for `--flag=value`, None for a separate token."""
    take_next = False
    for i, tok in enumerate(argv):
        if take_next:
            take_next = False
            if not tok.startswith("--"):
                yield i, None
                continue
        if i == 0 or not tok.startswith("-"):
            continue
        name, eq, _ = tok.partition("=")
        if is_secret_flag(name):
            if eq:
                yield i, name + "="
            else:
                take_next = True


def redact_argv(argv: list[str]) -> list[str]:
    """argv with the value of every secret-bearing flag replaced by REDACTED (both `--f v` and `--f=v`)."""
    out = list(argv)
    for i, prefix in _secret_positions(argv):
        out[i] = REDACTED if prefix is None else prefix + REDACTED
    return out


def _key_file_values(path: str) -> list[str]:
    try:
        data = read_bounded(Path(path), MAX_KEY_FILE_BYTES, "an API key file holds a few keys")
    except UsageError:  # the server cannot read it either; a FIFO or device is never opened blocking
        return []
    return [line.strip() for line in data.decode("utf-8", errors="replace").splitlines() if line.strip()]


def secret_values(argv: list[str], *, read_key_files: bool = True) -> list[str]:
    """The secret strings an argv carries, and the keys held by files it names (`--api-key-file`), longest first.
    `read_key_files=False` for an argv from elsewhere (a registry record): its paths name another host's files."""
    found: set[str] = set()
    for i, prefix in _secret_positions(argv):
        value = argv[i] if prefix is None else argv[i][len(prefix):]
        flag = argv[i - 1] if prefix is None else prefix[:-1]
        found.add(value)
        if read_key_files and _norm(flag).endswith("file"):
            found.update(_key_file_values(value))
        for part in value.split(","):  # llama-server takes several keys comma-separated
            found.add(part.strip())
    return sorted((v for v in found if len(v) >= MIN_SCRUB_LEN), key=lambda v: (-len(v), v))


def scrub_text(text: str, secrets: Iterable[str]) -> str:
    for value in secrets:
        text = text.replace(value, REDACTED)
    return text


def scrub_file(path: Path, secrets: list[str]) -> bool:
    """Rewrite `path` (an engine's log, before the receipt covers it) with secrets replaced; True if it changed."""
    if not secrets or not path.is_file() or path.is_symlink():
        return False
    try:
        raw = path.read_bytes()
    except OSError:
        return False
    clean = raw
    for value in secrets:
        clean = clean.replace(value.encode(), REDACTED.encode())
    if clean == raw:
        return False
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(clean)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        # No room for a copy (disk full): mask each secret in place, byte for byte, which needs no space.
        masked = raw
        for value in secrets:
            masked = masked.replace(value.encode(), b"*" * len(value.encode()))
        with contextlib.suppress(OSError), path.open("r+b") as fh:
            fh.write(masked)
    return True
