"""The map stays true: every module is named where a maintainer looks for it.

An area (a package or module directly under `servepack/`) is named in ARCHITECTURE.md's layer table as `area`; a
module or subpackage inside a package is named in that package's docstring as `name` (a subpackage as `name/`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import servepack

ROOT = Path(servepack.__file__).parent
ARCHITECTURE = ROOT.parents[1] / "ARCHITECTURE.md"


def _docstring(init: Path) -> str:
    return ast.get_docstring(ast.parse(init.read_text(), filename=str(init))) or ""


def unnamed(root: Path, architecture: str) -> list[str]:
    table = "\n".join(line for line in architecture.splitlines() if line.startswith("| "))
    bad = []
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(root)
        if path.name == "__init__.py":
            if len(rel.parts) == 1:
                continue
            name, where = rel.parts[-2], path.parent.parent  # a subpackage, named in its parent
            token = f"`{name}/`" if len(rel.parts) > 2 else f"`{name}`"
        else:
            name, where = path.stem, path.parent
            token = f"`{name}`"
        if where == root:
            if token not in table:
                bad.append(f"{rel}: area {token} is not in ARCHITECTURE.md's layer table")
        elif not re.search(re.escape(token), _docstring(where / "__init__.py")):
            bad.append(f"{rel}: {token} is named nowhere in {(where / '__init__.py').relative_to(root)}'s docstring")
    return bad


def test_every_module_is_named_in_its_package_docstring_or_the_layer_table() -> None:
    assert unnamed(ROOT, ARCHITECTURE.read_text()) == []


def test_the_check_catches_a_module_named_nowhere(tmp_path: Path) -> None:
    pkg = tmp_path / "servepack"
    (pkg / "bench" / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""root"""\n')
    (pkg / "errors.py").write_text("")
    (pkg / "stray.py").write_text("")
    (pkg / "bench" / "__init__.py").write_text('"""Bench.\n\nModules:\n\n- `runner`: runs.\n"""\n')
    (pkg / "bench" / "runner.py").write_text("")
    (pkg / "bench" / "orphan.py").write_text("")
    (pkg / "bench" / "inner" / "__init__.py").write_text('"""Inner."""\n')
    (pkg / "bench" / "inner" / "deep.py").write_text("")
    table = "| 0 | `errors` | the exceptions |\n| 5 | `bench` | measurers |\n"
    found = unnamed(pkg, table)
    assert any(f.startswith("stray.py:") for f in found)
    assert any(f.startswith("bench/orphan.py:") for f in found)
    assert any(f.startswith("bench/inner/__init__.py:") and "`inner/`" in f for f in found)
    assert any(f.startswith("bench/inner/deep.py:") for f in found)
    assert not any(f.startswith(("errors.py", "bench/runner.py", "bench/__init__.py")) for f in found)
    assert len(found) == 4
    # an area mentioned in prose, not as `bench`, does not count
    assert any(f.startswith("bench/__init__.py") for f in unnamed(pkg, table.replace("`bench`", "bench")))


def _table_ranks(architecture: str) -> dict[str, float]:
    ranks = {}
    for line in architecture.splitlines():
        m = re.match(r"^\| ([0-9]+)(½?) \| `([\w.]+)` \|", line)
        if m:
            ranks[m.group(3)] = int(m.group(1)) + (0.5 if m.group(2) else 0.0)
    return ranks


def test_the_layer_table_gives_each_area_the_rank_the_layer_test_enforces() -> None:
    from test_layers import RANK  # the rank the import check enforces

    assert _table_ranks(ARCHITECTURE.read_text()) == dict(RANK)


def test_the_rank_check_catches_a_wrong_rank() -> None:
    table = "| 0 | `errors` | x |\n| 4½ | `registry.format` | y |\n| 7 | `registry` | z |\n"
    assert _table_ranks(table) == {"errors": 0.0, "registry.format": 4.5, "registry": 7.0}
    assert _table_ranks(table.replace("| 7 |", "| 8 |")) != {"errors": 0.0, "registry.format": 4.5, "registry": 7.0}
