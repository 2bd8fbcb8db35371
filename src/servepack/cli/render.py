"""Shared output helpers: progress and tables on stderr, results on stdout; the one way text reaches the terminal.

Every line servepack prints goes through `echo` (many at once: `echo_lines`), `progress`, `table`, `print_json` or
`error_line`, and each shows the text it is given as text: a character that would steer the terminal (an escape
sequence, a carriage return, a bell, a C1 control, a bidi override) is printed as its escape (`\\x1b`, `\\r`,
`\\u202e`), and square brackets are never read as rich markup. Record fields, file names, server output and values
given on the command line can hold any of these; none can clear the screen, retitle the window, hide or rewrite a
line, or fail a command.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Iterable
from functools import cache
from json.encoder import INFINITY, encode_basestring_ascii
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console


@cache
def err_console() -> Console:
    """The console of progress lines and tables (stderr), made when first used: a command that shows neither
    (`registry list`, `--json`) starts without rich."""
    from rich.console import Console

    return Console(stderr=True)


def _markup_escaped(text: str) -> str:
    from rich.markup import escape

    return escape(text)


# What is shown as an escape: controls (C0 but tab, DEL, C1), format characters (bidi overrides and marks, zero-width
# characters), line and paragraph separators, and lone surrogates (which no terminal encoding takes).
_STEERING_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    code = ord(ch)
    return _NAMED.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
                              else f"\\U{code:08x}")


def terminal_text(text: str, *, one_line: bool = False) -> str:
    """`text` as it may reach a terminal: every steering character shown as its escape (tab kept); a newline kept
    unless `one_line` (an error is one line, whatever a name in it holds)."""
    if text.isprintable():
        return text
    keep = "\t" if one_line else "\t\n"
    return "".join(ch if ch in keep or unicodedata.category(ch) not in _STEERING_CATEGORIES else _escape(ch)
                   for ch in text)


def echo(message: object = "", *, err: bool = False, nl: bool = True) -> None:
    """One line of output (stdout, or stderr with `err`), shown as text: a line break in it is shown as `\\n`, so
    a value that holds one cannot pass for a line of servepack's own."""
    click.echo(terminal_text(str(message), one_line=True), err=err, nl=nl)


def echo_lines(lines: Iterable[object], *, err: bool = False) -> None:
    """Many lines, each shown as `echo` shows one, written at once (a long listing: one write, not one a line)."""
    shown = [terminal_text(str(line), one_line=True) for line in lines]
    if shown:
        click.echo("\n".join(shown), err=err)


def echo_block(text: str, *, err: bool = False) -> None:
    """A text of several lines (a file's content, indented JSON), each line shown as `echo` shows one."""
    for line in text.splitlines() or [""]:
        echo(line, err=err)


def error_line(prefix: str, message: object) -> None:
    """`prefix` and the message on stderr as exactly one line."""
    click.echo(f"{prefix}{terminal_text(str(message), one_line=True)}", err=True)


def progress(message: str) -> None:
    """One progress line on stderr (wrapped to the terminal's width; a line break in it shown as `\\n`)."""
    err_console().print(f"[dim]»[/dim] {_markup_escaped(terminal_text(message, one_line=True))}", highlight=False)


def print_json(obj: Any) -> None:
    """Machine output on stdout (ASCII: every control character is a JSON escape)."""
    click.echo(json_text(obj))


class _NotPlain(Exception):
    """A value `_indented` leaves to `json.dumps`: not a dict, list, tuple, str, int, float, bool or None of exactly
    that type (a subclass, a Path shown by `default=str`), or a key that is not a str."""


def _float_text(value: float) -> str:
    if value != value:
        return "NaN"
    return "Infinity" if value == INFINITY else "-Infinity" if value == -INFINITY else float.__repr__(value)


_SCALARS: dict[type, Callable[[Any], str]] = {
    str: encode_basestring_ascii, int: int.__repr__, float: _float_text, bool: lambda b: "true" if b else "false",
    type(None): lambda _: "null"}


def _indented(obj: Any, pad: str, out: list[str]) -> None:
    """`obj` as `json.dumps(obj, indent=2)` writes it at indentation `pad`, appended to `out` in parts."""
    kind, inner, scalar = type(obj), pad + "  ", _SCALARS.get
    if kind is dict:
        if not obj:
            out.append("{}")
            return
        sep = "{\n" + inner
        for key, value in obj.items():
            if type(key) is not str:
                raise _NotPlain
            plain = scalar(type(value))
            if plain is not None:
                out.append(sep + encode_basestring_ascii(key) + ": " + plain(value))
            else:
                out.append(sep + encode_basestring_ascii(key) + ": ")
                _indented(value, inner, out)
            sep = ",\n" + inner
        out.append("\n" + pad + "}")
    elif kind is list or kind is tuple:
        if not obj:
            out.append("[]")
            return
        sep = "[\n" + inner
        for value in obj:
            plain = scalar(type(value))
            if plain is not None:
                out.append(sep + plain(value))
            else:
                out.append(sep)
                _indented(value, inner, out)
            sep = ",\n" + inner
        out.append("\n" + pad + "]")
    else:
        plain = scalar(kind)
        if plain is None:
            raise _NotPlain
        out.append(plain(obj))


def json_text(obj: Any) -> str:
    """`json.dumps(obj, indent=2, default=str)`, the same text: a document of plain values (dicts with str keys,
    lists, tuples, str, int, float, bool, None) is written by `_indented`, twice as fast as the standard library's
    indenting encoder (pure Python: its C encoder does not indent), for `registry list --json`'s 10,000 records;
    anything else by `json.dumps` itself."""
    out: list[str] = []
    try:
        _indented(obj, "", out)
    except (_NotPlain, RecursionError):  # a circular document: json.dumps says so
        return json.dumps(obj, indent=2, default=str)
    return "".join(out)


def table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A table on stderr."""
    from rich.table import Table

    t = Table(title=_markup_escaped(terminal_text(title)), title_justify="left")
    for col in columns:
        t.add_column(_markup_escaped(terminal_text(col)), overflow="fold")
    for row in rows:
        t.add_row(*(_markup_escaped(terminal_text(cell)) for cell in row))
    err_console().print(t)


def fmt(value: float | None, digits: int = 1, unit: str = "") -> str:
    return "—" if value is None else f"{value:,.{digits}f}{unit}"
