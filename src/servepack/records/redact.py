"""Secrets in preset flags and argv never reach a record: values are replaced, the fact one was set is kept.

A flag is secret-bearing when a dash-separated part of its name is `key`, `api-key`, `token`, `secret`,
`password`, `auth`, `credential`, ... (`--api-key`, `--api-key-file`, `--ssl-key-file`, `--hf-token`). Its value
becomes `REDACTED` in receipt.json (preset flags, server argv, every process's argv) and therefore in everything
rendered from the receipt (MEASURED.md, registry records). Text written by the engine itself (its log) and error
messages are scrubbed of the secret values, including the keys an `--api-key-file` holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from servepack.errors import UsageError
from servepack.packs.flag_policy import is_secret_flag as is_secret_flag
from servepack.safepath import read_bounded
from servepack.store import REDACTED

# The length rule. A secret value is removed in two ways:
# - by the name of what holds it, whatever its length (three characters too): a flag's value in preset flags and in
#   argv (`--api-key abc`, `--api-key=abc`), and in a record (`redact_document`): an `--api-key abc` inside a
#   command string, an environment entry `LLAMA_API_KEY=abc`, a JSON field `"api_key": "abc"`;
# - by the value itself, from free text where no name says what it is (an engine's log, an error message, every
#   byte `store` writes). Only values at least this long are scrubbed so (`store.MIN_SECRET_LEN`, 8, for whole
#   files, where a short value could be part of a hash or a figure): removing "abc" from free text everywhere would
#   mangle the text and tell a reader the key. A short key is therefore safe only where its name travels with it.
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


# A secret-bearing flag inside a command string, with its value: `--api-key abc`, `--api-key=abc`, `--api-key "a b"`.
_FLAG_IN_TEXT = re.compile(r"""(?<![\w-])(--?[A-Za-z][\w-]*)(=|[ \t]+)("[^"]*"|'[^']*'|[^\s"']+)""")
# An environment assignment: `LLAMA_API_KEY=abc`, `-e HF_TOKEN=abc`, `?api_key=abc` in a URL.
_ENV_IN_TEXT = re.compile(r"""(?<![\w-])([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|'[^']*'|[^\s"'&]+)""")


def _quoted(value: str) -> str:
    quoted = len(value) >= 2 and value[0] in "\"'" and value[-1] == value[0]
    return value[0] + REDACTED + value[0] if quoted else REDACTED


def _redact_text(text: str) -> tuple[str, list[str]]:
    """A command line or other text with the value of every secret-bearing flag or variable named in it replaced."""
    found: list[str] = []

    def flag(m: re.Match[str]) -> str:
        name, sep, value = m.groups()
        if not is_secret_flag(name) or (sep != "=" and value.startswith("-")):
            return m.group(0)
        found.append(name)
        return name + sep + _quoted(value)

    def env(m: re.Match[str]) -> str:
        name, value = m.groups()
        if not is_secret_flag(name):
            return m.group(0)
        found.append(name)
        return f"{name}={_quoted(value)}"

    return _ENV_IN_TEXT.sub(env, _FLAG_IN_TEXT.sub(flag, text)), found


def _redact(node: Any, where: str, found: list[str]) -> Any:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        named = node.get("name") if isinstance(node.get("name"), str) and is_secret_flag(node["name"]) else None
        for key, value in node.items():
            here = f"{where}.{key}" if where else str(key)
            if isinstance(value, str) and (is_secret_flag(str(key)) or (named and key == "value")):
                found.append(f"{here} ({named or key})")  # `"api_key": "abc"`, `{"name": "HF_TOKEN", "value": …}`
                out[key] = REDACTED
            elif isinstance(value, list) and is_secret_flag(str(key)) and all(isinstance(v, str) for v in value):
                found.append(f"{here} ({key})")
                out[key] = [REDACTED for _ in value]
            else:
                out[key] = _redact(value, here, found)
        return out
    if isinstance(node, list):
        items = [_redact(v, f"{where}[{i}]", found) for i, v in enumerate(node)]
        if all(isinstance(v, str) for v in items):  # an argv: `["--api-key", "abc"]` (no program name needed)
            argv = ["argv", *items]
            for i, prefix in _secret_positions(argv):
                flag = argv[i - 1] if prefix is None else prefix[:-1]
                found.append(f"{where}[{i - 1}] ({flag})")
                items[i - 1] = REDACTED if prefix is None else prefix + REDACTED
        return items
    if isinstance(node, str):
        text, names = _redact_text(node)
        found.extend(f"{where} ({n})" for n in names)
        return text
    return node


def redact_document(doc: Any) -> tuple[Any, list[str]]:
    """A JSON document (a registry record, stored form or envelope) with every secret value replaced by REDACTED,
    and where each one was (`launch.arguments[5] (--api-key)`), by the names that hold secrets (`is_secret_flag`):
    a field named so (`api_key`, an env object's `LLAMA_API_KEY`, `{"name": "HF_TOKEN", "value": …}`), the value
    after such a flag in a list of strings (an argv, docker arguments), and such a flag or variable inside a string
    (an observed command `llama-server --api-key abc`, `LLAMA_API_KEY=abc`). A value already REDACTED is listed too,
    so a record redacted when it was stored still says where its secrets were."""
    found: list[str] = []
    clean = _redact(doc, "", found)
    return clean, list(dict.fromkeys(found))


def redact_record_bytes(raw: bytes) -> tuple[bytes, tuple[str, ...]]:
    """`raw` (a JSON record) with its secrets redacted (`redact_document`) and where they were. The bytes are kept as
    they are when nothing changed; otherwise the document is written again (indented, keys in their order)."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return raw, ()
    clean, found = redact_document(doc)
    if clean == doc:
        return raw, tuple(found)
    return (json.dumps(clean, indent=2, ensure_ascii=False) + "\n").encode(), tuple(found)
