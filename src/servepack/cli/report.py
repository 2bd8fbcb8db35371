"""`servepack report DIR… [--out FILE.html]`: the evidence as one self-contained page."""

from __future__ import annotations

from pathlib import Path

import click

from servepack.cli.render import echo, progress
from servepack.registry.format import load_record
from servepack.report import write_report


@click.command("report")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Where the page goes (default: DIR/report.html; required with several DIRs).")
@click.option("--record", "records", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A local-ai-registry/v1 record to set beside the run (repeatable).")
def report_cmd(dirs: tuple[Path, ...], out: Path | None, records: tuple[Path, ...]) -> None:
    """One HTML file (no script, no network) from runs or pack results folders: plots with their numbers."""
    loaded = [load_record(p) for p in records]
    path = write_report(list(dirs), out, loaded)
    progress(f"report: {path.stat().st_size / 1024:,.0f} KiB, self-contained")
    echo(str(path))


COMMANDS = [report_cmd]
