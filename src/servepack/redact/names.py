"""The names and values that are secrets (`servepack.redact`'s rule: "Names", "Switches are not secrets"): which
name holds one (`is_secret_name`: the secret word ends the name; `holds_secret`, `env_holds_secret` for a variable
whose name glues words), which value is only a switch (`is_switch`) or a reference to a variable (`is_reference`),
a preset's flags and an argv with their secret values replaced (`redact_flags`, `redact_argv`), and the secret values
an argv carries, key files included (`secret_values`), for removal by value elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from servepack.errors import UsageError
from servepack.packs.flag_policy import is_secret_flag
from servepack.safepath import read_bounded
from servepack.store import REDACTED

# Free text is scrubbed of values at least this long (the module docstring: "By value"); shorter ones by name only.
MIN_SCRUB_LEN = 4
MAX_KEY_FILE_BYTES = 1 << 16
# Values that only turn something on or off: never a secret, whatever the name (the module docstring: "Switches").
SWITCH_VALUES = frozenset({"", "0", "1", "true", "false", "yes", "no", "on", "off", "bool:true", "bool:false"})
# A variable's name glues words (HFTOKEN): the receipt's record of the environment takes these at the end of a name
# (`TOKENIZERS_PARALLELISM`, `LONG_PREFILL_TOKEN_THRESHOLD` are not secrets).
_SECRET_IN_ENV_NAME = re.compile(r"(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|AUTH|CREDENTIALS?|COOKIE)(?:_?FILE|_?PATH)?$",
                                 re.IGNORECASE)
# A value that names a variable of the launching shell instead of holding one: `$HF_TOKEN`, `${HF_TOKEN}`,
# `${HF_TOKEN:-}` (empty default), `${HF_TOKEN:?set it}` (an error message). A default that is not empty may be a key.
# The closing brace may be missing: a TOML-like `NAME=${NAME:-}` hands its value over up to the `}`.
_REFERENCE = re.compile(r"\$(?:[A-Za-z_]\w*|\{[A-Za-z_]\w*(?::?-|:?\?[^}]*)?\}?)")
V = TypeVar("V")


def _norm(name: str) -> str:
    return name.lstrip("-").lower().replace("_", "-")


def is_switch(value: object) -> bool:
    """A value that only turns something on or off (`true`, `0`, `off`, a boolean, ...): never a secret."""
    if isinstance(value, bool):
        return True
    if isinstance(value, int | float):
        return value in (0, 1)
    if not isinstance(value, str):
        return False
    v = value.strip()
    if len(v) >= 2 and v[0] in "\"'" and v[-1] == v[0]:
        v = v[1:-1].strip()
    return v.lower() in SWITCH_VALUES


def is_reference(value: object) -> bool:
    """A value that only names a variable of the shell that launches it (`${HF_TOKEN:-}`): no secret in itself."""
    if not isinstance(value, str):
        return False
    v = value.strip()
    if len(v) >= 2 and v[0] in "\"'" and v[-1] == v[0]:
        v = v[1:-1].strip()
    return _REFERENCE.fullmatch(v) is not None


def is_secret_name(name: str) -> bool:
    """A name whose value is a secret: the secret word at its end, or before only `file`/`path` (`--api-key`,
    `--ssl-key-file`, `HF_TOKEN`); never a name the word is merely inside (`--long-prefill-token-threshold`), nor a
    count (`--max-tokens`, `n_tokens`). The one rule, the flag policy's (`packs.flag_policy.is_secret_flag`), so a
    tune space refuses exactly the names redaction hides."""
    return is_secret_flag(name)


def holds_secret(name: str, value: object) -> bool:
    """The one rule: `name` is a secret's (`is_secret_name`) and `value` is neither a switch nor a reference."""
    return is_secret_name(name) and not is_switch(value) and not is_reference(value)


def env_holds_secret(name: str, value: object) -> bool:
    """`holds_secret` for an environment variable, whose name may glue words (`HFTOKEN`, `SERVEPACK_APIKEY`)."""
    return ((is_secret_name(name) or bool(_SECRET_IN_ENV_NAME.search(name)))
            and not is_switch(value) and not is_reference(value))


def redact_flags(flags: Mapping[str, V]) -> dict[str, V | str]:
    """Preset flags with every secret value replaced by REDACTED, numbers too; switches are kept as they are."""
    return {k: (REDACTED if holds_secret(k, v) else v) for k, v in flags.items()}


def secret_positions(argv: list[str]) -> Iterable[tuple[int, str | None]]:
    """(index, flag prefix) of each secret value in argv: prefix for `--flag=value`, None for a separate token."""
    take_next: str | None = None
    for i, tok in enumerate(argv):
        if take_next is not None:
            flag, take_next = take_next, None
            if not tok.startswith("--"):
                if holds_secret(flag, tok):
                    yield i, None
                continue
        if i == 0 or not tok.startswith("-"):
            continue
        name, eq, value = tok.partition("=")
        if is_secret_name(name):
            if not eq:
                take_next = name
            elif holds_secret(name, value):
                yield i, name + "="


def redact_argv(argv: list[str]) -> list[str]:
    """argv with the value of every secret-bearing flag replaced by REDACTED (both `--f v` and `--f=v`)."""
    out = list(argv)
    for i, prefix in secret_positions(argv):
        out[i] = REDACTED if prefix is None else prefix + REDACTED
    return out


def _key_file_values(path: str) -> list[str]:
    try:
        data = read_bounded(Path(path), MAX_KEY_FILE_BYTES, "an API key file holds a few keys")
    except UsageError:  # the server cannot read it either; a FIFO or device is never opened blocking
        return []
    return [line.strip() for line in data.decode("utf-8", errors="replace").splitlines() if line.strip()]


def secret_values(argv: list[str], *, read_key_files: bool = True) -> list[str]:
    """The secret strings an argv carries, and the keys held by files it names (`--api-key-file`), longest first;
    only those long enough to be scrubbed from free text by value (`MIN_SCRUB_LEN`: shorter ones go by name).
    `read_key_files=False` for an argv from elsewhere (a registry record): its paths name another host's files."""
    found: set[str] = set()
    for i, prefix in secret_positions(argv):
        value = argv[i] if prefix is None else argv[i][len(prefix):]
        flag = argv[i - 1] if prefix is None else prefix[:-1]
        found.add(value)
        if read_key_files and _norm(flag).endswith("file"):
            found.update(_key_file_values(value))
        for part in value.split(","):  # llama-server takes several keys comma-separated
            found.add(part.strip())
    return sorted((v for v in found if len(v) >= MIN_SCRUB_LEN and not is_switch(v) and v != REDACTED),
                  key=lambda v: (-len(v), v))

