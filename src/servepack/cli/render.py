"""Shared output helpers: progress and tables on stderr, results on stdout."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

err_console = Console(stderr=True)


def progress(message: str) -> None:
    """One progress line on stderr."""
    err_console.print(f"[dim]»[/dim] {message}", highlight=False)


def print_json(obj: Any) -> None:
    """Machine output on stdout."""
    click.echo(json.dumps(obj, indent=2, default=str))


def table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A table on stderr."""
    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*row)
    err_console.print(t)


def fmt(value: float | None, digits: int = 1, unit: str = "") -> str:
    return "—" if value is None else f"{value:,.{digits}f}{unit}"
