"""`cli.render.echo_lines`: many lines written at once (a listing of 10,000 recipes is one write, not 15,000), each
shown exactly as `echo` shows one line. The wrong answers: a line break or a terminal escape inside a line passing
through as a line of its own or as a control, an empty line lost, something written for no lines at all."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from servepack.cli.render import echo, echo_lines

LINES = ["plain", "", "with\nbreak", "esc \x1b[2J clear", "bidi \u202e flip", "tab\tkept", "[bold]not markup[/bold]",
         "ünïcode ok", 42]


def _printed(capsys: pytest.CaptureFixture[str], write: Callable[[], object]) -> tuple[str, str]:
    write()
    got = capsys.readouterr()
    return got.out, got.err


def test_echo_lines_prints_what_echo_prints_line_by_line(capsys: pytest.CaptureFixture[str]) -> None:
    at_once = _printed(capsys, lambda: echo_lines(LINES))
    one_by_one = _printed(capsys, lambda: [echo(line) for line in LINES])
    assert at_once == one_by_one
    out = at_once[0]
    assert out.count("\n") == len(LINES)  # one line each, the break inside shown as \n
    assert "with\\nbreak" in out and "\\x1b[2J" in out and "\\u202e" in out and "\x1b" not in out
    assert _printed(capsys, lambda: echo_lines(LINES, err=True)) == ("", out)


def test_no_lines_print_nothing_and_one_empty_line_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert _printed(capsys, lambda: echo_lines([])) == ("", "")
    assert _printed(capsys, lambda: echo_lines([""])) == ("\n", "")
    assert _printed(capsys, lambda: echo_lines(iter(["a", "b"]))) == ("a\nb\n", "")
