"""Load shapes are asked through their table (`bench.shapes.SHAPES`, issue 31 item 3): no module compares a shape's
name, `--shape` offers the table's names with each shape's own help, and each shape's unit is the one table's."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from pydantic import ValidationError

from servepack.bench.capacity import level_unit
from servepack.bench.load import LoadSettings
from servepack.bench.shapes import SHAPES, shape_for
from servepack.cli.capacity import capacity_cmd
from servepack.errors import UsageError

SRC = Path(__file__).parents[3] / "src" / "servepack"
# `registry.format.lab_launch`'s shape is a lab recipe's launch shape (frozen, template), not a load shape.
OTHER_SHAPE = {Path("registry/format/lab_launch.py")}
# `x.shape == ...`, `shape != ...`, `shape in (...)`, `shape not in [...]`, and the same written the other way round.
COMPARED = re.compile(r"\bshape\b\s*(?:==|!=|(?:not\s+)?in\s*[(\[{])|(?:==|!=)\s*[\w.]*\bshape\b(?!\.)")


def compared_shapes(root: Path) -> list[str]:
    """`file:line: text` for each comparison of a shape's name under `root`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root) in OTHER_SHAPE:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if COMPARED.search(line):
                found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return found


def test_no_module_compares_a_shape_name() -> None:
    assert compared_shapes(SRC) == []


def test_the_grep_catches_every_form_of_a_comparison(tmp_path: Path) -> None:
    bad = ['if s.shape == "open":', 'integer = settings.shape != "open"', 'if shape in ("open", "agent"):',
           'if p.shape not in ["agent"]:', 'if "agent" == p.shape:', "warm = shape == 'agent'"]
    good = ["shape = shape_for(s.shape)", "if shape.counts_streams:", "shapes == other", "x = load_shape.warm",
            'row["load_shape"] = st.shape']
    (tmp_path / "m.py").write_text("\n".join(bad + good) + "\n")
    assert [line.split(": ", 1)[1] for line in compared_shapes(tmp_path)] == bad


def test_cli_shape_choices_and_help_come_from_the_table() -> None:
    option = next(p for p in capacity_cmd.params if p.name == "shape")
    assert isinstance(option.type, click.Choice) and list(option.type.choices) == list(SHAPES) == \
        ["closed", "open", "agent"]
    assert option.help == ("closed: N streams back to back; open: arrivals at a rate; agent: N multi-turn sessions "
                           "(warm).")


def test_each_shape_reads_its_level_as_before() -> None:
    assert [level_unit(n) for n in SHAPES] == ["streams", "requests/s", "sessions"]
    assert [(s.counts_streams, s.scheduled, s.warm, s.spreads) for s in SHAPES.values()] == \
        [(True, False, False, True), (False, True, False, True), (True, False, True, False)]
    assert [s.budget(LoadSettings(shape=n, max_requests=50, duration_s=2.0), 4.5) for n, s in SHAPES.items()] == \
        [50, 9, 50]
    assert [s.width(4.5, 4) for s in SHAPES.values()] == [4, 5, 4]


def test_an_unknown_shape_is_refused_with_the_known_ones() -> None:
    with pytest.raises(UsageError, match=r"--shape 'burst' is not a load shape; choose one of closed, open, agent"):
        shape_for("burst")
    with pytest.raises(ValidationError, match="Input should be 'closed', 'open' or 'agent'"):
        LoadSettings(shape="burst")
    with pytest.raises(ValidationError, match="drop --client-workers for --shape agent"):
        LoadSettings(shape="agent", workers=2)
    assert LoadSettings(shape="open", workers=2).workers == 2  # the wrong answer: only agent refuses workers
