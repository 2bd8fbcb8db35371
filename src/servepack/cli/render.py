"""Shared output helpers: progress and tables on stderr, results on stdout; the one way text reaches the terminal.

Every line servepack prints goes through `echo`, `progress`, `table`, `print_json` or `error_line`, and each shows
the text it is given as text: a character that would steer the terminal (an escape sequence, a carriage return, a
bell, a C1 control, a bidi override) is printed as its escape (`\\x1b`, `\\r`, `\\u202e`), and square brackets
are never read as rich markup. Record fields, file names, server output and values given on the command line
can hold any of these; none can clear the screen, retitle the window, hide or rewrite a line, or fail a command.
"""

from __future__ import annotations

import json
import re
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

err_console = Console(stderr=True)

# C0 controls but tab and newline, DEL, C1 controls, and the invisible bidi / direction marks and overrides.
_STEERING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_LINE_BREAKS = re.compile("[\n\x85\u2028\u2029]")


def _escaped(match: re.Match[str]) -> str:
    ch = match.group()
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return named.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def terminal_text(text: str, *, one_line: bool = False) -> str:
    """`text` as it may reach a terminal: every steering character shown as its escape; with `one_line` the line
    breaks too (an error is one line, whatever a name in it holds)."""
    text = _STEERING.sub(_escaped, text)
    return _LINE_BREAKS.sub(_escaped, text) if one_line else text


def echo(message: object = "", *, err: bool = False, nl: bool = True) -> None:
    """One line of output (stdout, or stderr with `err`), shown as text: a line break in it is shown as `\\n`, so
    a value that holds one cannot pass for a line of servepack's own."""
    click.echo(terminal_text(str(message), one_line=True), err=err, nl=nl)


def echo_block(text: str, *, err: bool = False) -> None:
    """A text of several lines (a file's content, indented JSON), each line shown as `echo` shows one."""
    for line in text.splitlines() or [""]:
        echo(line, err=err)


def error_line(prefix: str, message: object) -> None:
    """`prefix` and the message on stderr as exactly one line."""
    click.echo(f"{prefix}{terminal_text(str(message), one_line=True)}", err=True)


def progress(message: str) -> None:
    """One progress line on stderr (wrapped to the terminal's width; a line break in it shown as `\\n`)."""
    err_console.print(f"[dim]»[/dim] {escape(terminal_text(message, one_line=True))}", highlight=False)


def print_json(obj: Any) -> None:
    """Machine output on stdout (ASCII: every control character is a JSON escape)."""
    click.echo(json.dumps(obj, indent=2, default=str))


def table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A table on stderr."""
    t = Table(title=escape(terminal_text(title)), title_justify="left")
    for col in columns:
        t.add_column(escape(terminal_text(col)), overflow="fold")
    for row in rows:
        t.add_row(*(escape(terminal_text(cell)) for cell in row))
    err_console.print(t)


def fmt(value: float | None, digits: int = 1, unit: str = "") -> str:
    return "—" if value is None else f"{value:,.{digits}f}{unit}"
