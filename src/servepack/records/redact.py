"""Secrets in flags, argv, environment and records never reach a file servepack writes, nor a message it shows.

The rule, one for every writer (receipt.json, tune.json, trials.jsonl, reproduce.json, capacity.json, engine logs,
registry records, error messages):

- **Names.** A name holds a secret when a dash- or underscore-separated part of it is `key`/`keys`, `api-key`,
  `apikey`, `token`, `secret`, `password`, `passwd`, `pass`, `auth`, `credential`, `bearer` or `cookie`, or it is
  `hft` (`packs.flag_policy.is_secret_flag`): `--api-key`, `--api-key-file`, `--ssl-key-file`, `--hf-token`,
  `LLAMA_API_KEY`, `"api_key"`. `tokens` (plural) is a count, not a secret (`--image-max-tokens`). The receipt's
  record of the environment also takes a variable whose name merely contains one of them (`HFTOKEN`: variable names
  glue words).
- **Switches are not secrets.** A value that only turns something on or off — `true`/`false`, `yes`/`no`,
  `on`/`off`, `1`/`0`, empty, `bool:true`/`bool:false` (any case, quoted or not), a boolean, the numbers 0 and 1 —
  is kept whatever the name: `HF_HUB_DISABLE_IMPLICIT_TOKEN=1` is a switch about tokens. This opens no hole: a key
  that is one of these words is guessed in one try, so showing it gives nothing away. Every other value under such
  a name is a secret, numbers too where a server flag takes them (`api-key = 12345` in a pack, `--api-key 12345`);
  a JSON number in a registry record is a figure (`time_per_output_token_ms`), never taken for a key.
- **By name, whatever the length.** A secret value is replaced by `<redacted>` wherever its name travels with it,
  even a value of one character: preset flags (`redact_flags`), argv in both spellings (`--api-key abc`,
  `--api-key=abc`; `redact_argv`), a JSON document (`redact_document`: a field `"api_key": "abc"`, an env
  object, `{"name": "HF_TOKEN", "value": …}`, the value after such a flag in a list of strings), and text
  (`redact_text`: `--api-key abc`, `--api-key=abc`, `LLAMA_API_KEY=abc`, `api_key='abc'`, `"api_key": "abc"`,
  `'api_key': ['abc']`, an argv printed as a list `'--api-key', 'abc'`, a YAML line `admin_key: abc` — the rest of
  the line less a ` # comment`, a quoted value, a `[a, b]` list, a `|` block's lines; at a line's start, inside a
  quoted string or opening a `{…}` mapping, never inside a sentence — and a TOML pair `api-key = "abc"`, also
  dotted or in an inline table). A list of strings in a record (a template engine profile's config lines) is read
  as the lines of one text. Engine logs are rewritten so after every run (`scrub_file`, from the session's
  `finally`), and so are the error and the notes a receipt keeps and the error a session raises.
- **What is shown.** An error the CLI prints (`scrub_shown`): an internal error (exit 70) and every `--debug`
  traceback lose each secret value registered in this process (`store.registered_secrets`, by value, at least
  `MIN_SCRUB_LEN`) and every value a name marks; servepack's own error messages lose the registered values. A
  report section that could not be drawn says why the same way. `pack show` prints a pack with each preset's
  secret as `<redacted>` (`redact_pack`, `redact_pack_text`); `--reveal-secrets` prints the file as it is.
- **By value, from free text.** Where no name says what a value is (an engine's log line quoting the key alone, an
  error message), the values themselves are removed: those at least `MIN_SCRUB_LEN` (4) characters long from logs
  and messages, those at least `store.MIN_SECRET_LEN` (8) long from every byte `store` writes (registered by
  `store.register_secrets`; a shorter value could be part of a hash or a figure there). Removing "abc" everywhere
  would mangle the text and tell a reader the key, so a value shorter than that is safe only where its name travels
  with it — which is every place servepack itself writes one.
- **Messages quoting a record** (`registry check`, an import refused, a record file `reproduce` reads): each of
  the record's secret values, whatever its length, is removed from the message where it stands as a word of its
  own, then by name (`document_secrets`, `scrub_message`); the verdict is the record's own, as it was given.
- **Where a secret is not wanted at all**, it is refused: a tune space (`flag_policy.secret_flag_problem`), a pack
  file `tune --write-pack` writes (`tune.userpack`). tune.json keeps the base preset's flags redacted; a trial, the
  compare and `--resume` take the secret from the pack again.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from servepack.errors import UsageError
from servepack.packs.flag_policy import is_secret_flag as is_secret_flag
from servepack.packs.schema import Pack
from servepack.safepath import read_bounded
from servepack.store import REDACTED, registered_secrets

# Free text is scrubbed of values at least this long (the module docstring: "By value"); shorter ones by name only.
MIN_SCRUB_LEN = 4
MAX_KEY_FILE_BYTES = 1 << 16
# Values that only turn something on or off: never a secret, whatever the name (the module docstring: "Switches").
SWITCH_VALUES = frozenset({"", "0", "1", "true", "false", "yes", "no", "on", "off", "bool:true", "bool:false"})
# A variable's name glues words (HFTOKEN): the receipt's record of the environment takes these anywhere in a name.
_SECRET_IN_ENV_NAME = re.compile(r"TOKEN(?!S)|KEY|SECRET|PASSWORD|PASSWD|AUTH|CREDENTIAL|COOKIE", re.IGNORECASE)
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


def holds_secret(name: str, value: object) -> bool:
    """The one rule: `name` is secret-bearing (`is_secret_flag`) and `value` is not a switch."""
    return is_secret_flag(name) and not is_switch(value)


def env_holds_secret(name: str, value: object) -> bool:
    """`holds_secret` for an environment variable, whose name may glue words (`HFTOKEN`, `SERVEPACK_APIKEY`)."""
    return (is_secret_flag(name) or bool(_SECRET_IN_ENV_NAME.search(name))) and not is_switch(value)


def redact_flags(flags: Mapping[str, V]) -> dict[str, V | str]:
    """Preset flags with every secret value replaced by REDACTED, numbers too; switches are kept as they are."""
    return {k: (REDACTED if holds_secret(k, v) else v) for k, v in flags.items()}


def _secret_positions(argv: list[str]) -> Iterable[tuple[int, str | None]]:
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
        if is_secret_flag(name):
            if not eq:
                take_next = name
            elif holds_secret(name, value):
                yield i, name + "="


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
    """The secret strings an argv carries, and the keys held by files it names (`--api-key-file`), longest first;
    only those long enough to be scrubbed from free text by value (`MIN_SCRUB_LEN`: shorter ones go by name).
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
    return sorted((v for v in found if len(v) >= MIN_SCRUB_LEN and not is_switch(v) and v != REDACTED),
                  key=lambda v: (-len(v), v))


def scrub_text(text: str, secrets: Iterable[str]) -> str:
    """`text` (an error, a note, a log) with each secret value replaced, then every value a name marks as secret."""
    for value in secrets:
        text = text.replace(value, REDACTED)
    return redact_text(text)[0]


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
    return _apply(text, _text_spans(text), mask).encode("utf-8", errors="surrogateescape")


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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(clean)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        # No room for a copy (disk full): mask each secret in place, byte for byte, which needs no space.
        with contextlib.suppress(OSError), path.open("r+b") as fh:
            fh.write(_scrub_bytes(raw, secrets, mask=True))
    return True


_NAME = r"[A-Za-z_][\w.-]*"
_QUOTED = r""""(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'"""
# A secret-bearing flag inside a text, with its value: `--api-key abc`, `--api-key=abc`, `--api-key "a b"`.
_FLAG_IN_TEXT = re.compile(rf"""(?<![\w-])(--?[A-Za-z][\w-]*)(=|[ \t]+)(?=({_QUOTED}|[^\s"']+))""")
# An assignment: `LLAMA_API_KEY=abc`, `-e HF_TOKEN=abc`, `?api_key=abc` in a URL, `api_key='abc'` (a Namespace).
_ENV_IN_TEXT = re.compile(rf"""(?<![\w-])([A-Za-z_][A-Za-z0-9_]*)=({_QUOTED}|[^\s"'&,)]+)""")
# A quoted key and its value, as JSON or a Python dict prints it: `"api_key": "abc"`, `'api_key': ['abc']`, `: 123`.
_KEY_IN_TEXT = re.compile(rf"""(["'])({_NAME})\1[ \t]*:[ \t]*({_QUOTED}|-?\d[\w.+-]*|\[[^\]\n]*\])""")
# An argv printed as a list: `'--api-key', 'abc'`. A value is looked ahead at, never taken, so the flag a valueless
# flag is followed by is seen too (`--jinja --api-key abc`).
_LISTED_FLAG = re.compile(rf"""(["'])(--?[A-Za-z][\w-]*)\1[ \t]*,[ \t]*(?=({_QUOTED}))""")
_ITEM = re.compile(rf"""{_QUOTED}|-?\d[\w.+-]*""")
_QUOTED_AT = re.compile(_QUOTED)
# A YAML mapping line: `admin_key: abc`, `  - token: "a b"`, `"api_key": abc`, `password: |` and the lines below it.
# The value is the rest of the line, less a ` # comment`: a plain YAML value may hold spaces, quotes and commas.
_YAML_LINE = re.compile(rf"""^([ \t]*(?:-[ \t]+)*)(?:({_NAME})|"({_NAME})"|'({_NAME})')[ \t]*:(?=[ \t]|$)[ \t]*""",
                        re.M)
# A YAML line inside a quoted string (`'admin_key: abc'` in a printed list) or opening a flow mapping (`{token: abc}`).
_YAML_INLINE = re.compile(rf"""(["'{{])[ \t]*({_NAME})[ \t]*:[ \t]+""")
_YAML_UNTIL = {'"': re.compile(r'(?:[^"\\\n]|\\.)*'), "'": re.compile(r"[^'\n]*"), "{": re.compile(r"[^,}\n]*")}
_YAML_BLOCK = re.compile(r"[|>][-+1-9]*[ \t]*(?:#.*)?")
_COMMENT = re.compile(r"(.*?)(?:[ \t]+#.*)?[ \t]*")
_NULL = frozenset({"null", "Null", "NULL", "~"})  # YAML's and JSON's "no value": nothing is set
# A TOML key and value at the start of a line or in an inline table: `api-key = "abc"`, `"api-key" = 12345`,
# `flags.api-key = """abc"""`, `{ hf-token = 'abc' }`.
_TKEY = r"""[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'"""
# `NAME= x` (no space before, one after) is a shell's empty variable, not TOML; `==` is a comparison.
_TOML_KEY = re.compile(rf"""(?:^|(?<=[{{,]))[ \t]*((?:{_TKEY})(?:[ \t]*\.[ \t]*(?:{_TKEY}))*)"""
                       r"(?:[ \t]+=(?!=)[ \t]*|=(?![ \t=]))", re.M)
_TKEY_PART = re.compile(_TKEY)
_TRIPLE = re.compile(r'"""(?:[^\\]|\\.)*?"""|' + r"'''[\s\S]*?'''")
_BARE = re.compile(r"[^\s,}\]#]+")
_SEQ_ITEM = re.compile(rf"""{_QUOTED}|[^\s,\[\]][^,\]\n]*""")


def _line_end(text: str, at: int) -> int:
    end = text.find("\n", at)
    return len(text) if end < 0 else end


def _block_lines(text: str, at: int, indent: int) -> Iterable[tuple[int, int]]:
    """(start, end) of the content of each line after `at` (a newline) indented more than `indent`: a YAML block
    scalar's lines (`password: |`); blank lines inside it are passed over."""
    while at < len(text) and text[at] == "\n":
        start = at + 1
        end = _line_end(text, start)
        line = text[start:end]
        if line.strip():
            content = len(line) - len(line.lstrip(" \t"))
            if content <= indent:
                return
            yield start + content, start + len(line.rstrip())
        at = end


def _unquoted(start: int, end: int, text: str) -> tuple[int, int]:
    if end - start >= 2 and text[start] in "\"'" and text[end - 1] == text[start]:
        return start + 1, end - 1
    return start, end


def _yaml_spans(text: str, add: Callable[[str, int, int], None], add_seq: Callable[[str, int], None]) -> None:
    """The secret values of YAML mapping lines in `text` (`_YAML_LINE`, `_YAML_INLINE`), each handed to `add`."""
    for m in _YAML_LINE.finditer(text):
        name, at = m.group(2) or m.group(3) or m.group(4), m.end()
        end = _line_end(text, at)
        rest = text[at:end]
        if rest[:1] in ("'", '"'):
            quoted = _QUOTED_AT.match(text, at, end)
            if quoted:
                add(name, at, quoted.end())
        elif rest[:1] == "[":
            add_seq(name, at)
        elif rest[:1] == "{" or rest in _NULL:
            continue  # a nested mapping (its first key is looked at by _YAML_INLINE), or no value
        elif _YAML_BLOCK.fullmatch(rest):  # `password: |`: the lines below it, indented more, are the value
            for start, stop in _block_lines(text, end, len(m.group(1))):
                add(name, start, stop)
        elif m.group(2) is None:  # a quoted key, as JSON writes one: the value is one word (`12345,`)
            bare = _BARE.match(text, at, end)
            if bare and bare.group() not in _NULL:
                add(name, at, bare.end())
        else:
            plain = _COMMENT.fullmatch(rest)
            add(name, at, at + len(plain.group(1) if plain else rest))
    for m in _YAML_INLINE.finditer(text):
        value = _YAML_UNTIL[m.group(1)].match(text, m.end())
        if value and value.group().strip() not in _NULL:
            add(m.group(2), m.end(), m.end() + len(value.group().rstrip()))


def _toml_spans(text: str, add: Callable[[str, int, int], None], add_seq: Callable[[str, int], None]) -> None:
    """The secret values of TOML key/value pairs in `text` (`_TOML_KEY`: a pack), each handed to `add`."""
    for m in _TOML_KEY.finditer(text):
        name, at = _TKEY_PART.findall(m.group(1))[-1].strip("\"'"), m.end()
        triple = _TRIPLE.match(text, at)
        if triple:
            add(name, at + 3, triple.end() - 3)
        elif text[at:at + 1] in ("'", '"'):
            quoted = _QUOTED_AT.match(text, at, _line_end(text, at))
            if quoted:
                add(name, at, quoted.end())
        elif text[at:at + 1] == "[":
            add_seq(name, at)
        elif bare := _BARE.match(text, at, _line_end(text, at)):
            add(name, at, bare.end())


def _text_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of every secret value a name marks in `text`, quotes excluded, in order, none overlapping."""
    spans: list[tuple[int, int, str]] = []

    def add(name: str, start: int, end: int) -> None:
        start, end = _unquoted(start, end, text)
        if holds_secret(name.rsplit(".", 1)[-1], text[start:end]):  # a dotted key: its last part names it
            spans.append((start, end, name))

    def add_seq(name: str, at: int) -> None:  # `[a, "b"]` on one line: each item
        close = text.find("]", at, _line_end(text, at))
        for item in _SEQ_ITEM.finditer(text, at + 1, max(close, at + 1)):
            add(name, item.start(), item.start() + len(item.group().rstrip()))

    for m in _FLAG_IN_TEXT.finditer(text):
        if m.group(2) == "=" or not m.group(3).startswith("-"):
            add(m.group(1), m.start(3), m.end(3))
    for m in _ENV_IN_TEXT.finditer(text):
        add(m.group(1), m.start(2), m.end(2))
    for m in _LISTED_FLAG.finditer(text):
        if not m.group(3)[1:].startswith("-"):
            add(m.group(2), m.start(3), m.end(3))
    for m in _KEY_IN_TEXT.finditer(text):
        if m.group(3).startswith("["):
            for item in _ITEM.finditer(text, m.start(3) + 1, m.end(3) - 1):
                add(m.group(2), item.start(), item.end())
        else:
            add(m.group(2), m.start(3), m.end(3))
    _yaml_spans(text, add, add_seq)
    _toml_spans(text, add, add_seq)
    out: list[tuple[int, int, str]] = []
    for span in sorted(spans):
        if out and span[0] < out[-1][1]:
            if span[1] > out[-1][1]:
                out[-1] = (out[-1][0], span[1], out[-1][2])
            continue
        out.append(span)
    return out


def _apply(text: str, spans: list[tuple[int, int, str]], mask: bool = False) -> str:
    parts, at = [], 0
    for start, end, _ in spans:
        parts += [text[at:start], "*" * (end - start) if mask else REDACTED]
        at = end
    return "".join([*parts, text[at:]])


def redact_text(text: str) -> tuple[str, list[str]]:
    """`text` (a command line, a log, an error) with the value of every secret-bearing flag, variable or key named
    in it replaced, and those names in order."""
    spans = _text_spans(text)
    return _apply(text, spans), [name for _, _, name in spans]


def _lines_redacted(lines: list[str], where: str, found: list[str], values: list[str]) -> list[str]:
    """A list of strings redacted as the lines of one text (a template profile's config: a YAML block scalar's value
    is on the lines below its name), each line's secrets listed as `where[i] (name)`."""
    spans = _text_spans("\n".join(lines))
    out, at = [], 0
    for i, line in enumerate(lines):
        end = at + len(line)
        mine = [(max(a, at) - at, min(b, end) - at, name) for a, b, name in spans if a < end and b > at]
        found.extend(f"{where}[{i}] ({name})" for _, _, name in mine)
        values.extend(line[a:b] for a, b, _ in mine)
        out.append(_apply(line, mine))
        at = end + 1
    return out


def _redact(node: Any, where: str, found: list[str], values: list[str]) -> Any:
    """`node` redacted; where each secret was goes to `found`, the value itself (as it was) to `values`. A JSON number
    in a record is a figure (`time_per_output_token_ms`), never a secret: a key there is a string."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        named = node.get("name") if isinstance(node.get("name"), str) and is_secret_flag(node["name"]) else None
        for key, value in node.items():
            here = f"{where}.{key}" if where else str(key)
            if isinstance(value, str) and (holds_secret(str(key), value)
                                           or (named and key == "value" and not is_switch(value))):
                found.append(f"{here} ({named or key})")  # `"api_key": "abc"`, `{"name": "HF_TOKEN", "value": …}`
                values.append(value)
                out[key] = REDACTED
            elif (isinstance(value, list) and is_secret_flag(str(key)) and value
                  and all(isinstance(v, str) for v in value)):
                found.append(f"{here} ({key})")
                values.extend(v for v in value if not is_switch(v))
                out[key] = [v if is_switch(v) else REDACTED for v in value]
            else:
                out[key] = _redact(value, here, found, values)
        return out
    if isinstance(node, list):
        if node and all(isinstance(v, str) for v in node):  # read as the lines of one text, then as an argv
            items = _lines_redacted(node, where, found, values)
        else:
            items = [_redact(v, f"{where}[{i}]", found, values) for i, v in enumerate(node)]
        if all(isinstance(v, str) for v in items):  # an argv: `["--api-key", "abc"]` (no program name needed)
            argv = ["argv", *items]
            for i, prefix in _secret_positions(argv):
                flag = argv[i - 1] if prefix is None else prefix[:-1]
                found.append(f"{where}[{i - 1}] ({flag})")
                values.append(argv[i] if prefix is None else argv[i][len(prefix):])
                items[i - 1] = REDACTED if prefix is None else prefix + REDACTED
        return items
    if isinstance(node, str):
        spans = _text_spans(node)
        found.extend(f"{where} ({name})" for _, _, name in spans)
        values.extend(node[a:b] for a, b, _ in spans)
        return _apply(node, spans)
    return node


def document_secrets(doc: Any) -> list[str]:
    """Every secret value `redact_document` removes from `doc`, as it stands there (any length), longest first."""
    values: list[str] = []
    _redact(doc, "", [], values)
    return sorted({v for v in values if v and v != REDACTED}, key=lambda v: (-len(v), v))


def scrub_message(text: str, secrets: Iterable[str]) -> str:
    """A message that may quote a record (a rule it breaks: `'--api-key=abc' is not one of [...]`) with each of the
    record's secret values (`document_secrets`, any length) removed where it stands as a word of its own, then every
    value a name marks (`redact_text`)."""
    for value in secrets:
        text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(value)}(?![A-Za-z0-9])", REDACTED, text)
    return redact_text(text)[0]


def redact_document(doc: Any) -> tuple[Any, list[str]]:
    """A JSON document (a registry record, stored form or envelope) with every secret value replaced by REDACTED,
    and where each one was (`launch.arguments[5] (--api-key)`), by the names that hold secrets (`is_secret_flag`):
    a field named so (`api_key`, an env object's `LLAMA_API_KEY`, `{"name": "HF_TOKEN", "value": …}`), the value
    after such a flag in a list of strings (an argv, docker arguments), and such a flag or variable inside a string
    (an observed command `llama-server --api-key abc`, `LLAMA_API_KEY=abc`). A value already REDACTED is listed too,
    so a record redacted when it was stored still says where its secrets were."""
    found: list[str] = []
    clean = _redact(doc, "", found, [])
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
