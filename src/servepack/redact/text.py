"""The rules that find a secret value by its name in free text (`servepack.redact`'s rule: "By name, whatever the
length"): a flag and its value, an assignment, a quoted key, an argv printed as a list, a YAML mapping line (a quoted
value, a `[a, b]` list, a `|` block), a TOML pair; `redact_text` replaces what they find, `scrub_text` removes given
values first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from servepack.redact.names import holds_secret
from servepack.store import REDACTED


def scrub_text(text: str, secrets: Iterable[str]) -> str:
    """`text` (an error, a note, a log) with each secret value replaced, then every value a name marks as secret."""
    for value in secrets:
        text = text.replace(value, REDACTED)
    return redact_text(text)[0]


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


def text_spans(text: str) -> list[tuple[int, int, str]]:
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


def apply_spans(text: str, spans: list[tuple[int, int, str]], mask: bool = False) -> str:
    parts, at = [], 0
    for start, end, _ in spans:
        parts += [text[at:start], "*" * (end - start) if mask else REDACTED]
        at = end
    return "".join([*parts, text[at:]])


def redact_text(text: str) -> tuple[str, list[str]]:
    """`text` (a command line, a log, an error) with the value of every secret-bearing flag, variable or key named
    in it replaced, and those names in order."""
    spans = text_spans(text)
    return apply_spans(text, spans), [name for _, _, name in spans]

