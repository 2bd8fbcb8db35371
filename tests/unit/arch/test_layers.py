"""Imports only go down the layers (ARCHITECTURE.md): a module never imports a higher layer or a sibling area."""

from __future__ import annotations

import ast
from pathlib import Path

import servepack

ROOT = Path(servepack.__file__).parent

# Lowest first. Areas on one rank may not import each other (bench and smoke are independent measurers).
LAYERS: list[set[str]] = [
    {"__init__", "errors"},
    {"settings", "store", "net", "safepath", "testing"},
    {"packs"},
    {"host", "weights"},
    {"engine"},
    {"bench", "smoke"},
    {"records"},
    {"tune", "registry", "reproduce"},
    {"report"},
    {"session"},
    {"pipeline", "doctor"},
    {"cli"},
]
RANK = {area: i for i, areas in enumerate(LAYERS) for area in areas}


def _area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "servepack":
                # `from servepack import records` names an area; `from servepack import __version__` the root
                out += [(node.lineno, f"servepack.{a.name}" if a.name in RANK else "servepack") for a in node.names]
            elif node.module.startswith("servepack."):
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("servepack.")]
    return out


def violations(root: Path = ROOT) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        own = rel.parts[0].removesuffix(".py")
        if own not in RANK:
            bad.append(f"{rel}: area {own!r} has no layer; add it to LAYERS and ARCHITECTURE.md")
            continue
        for line, target in _imports(path):
            other = _area(target)
            if other == own:
                continue
            if other not in RANK:
                bad.append(f"{rel}:{line}: imports {target}, an area with no layer")
            elif RANK[other] >= RANK[own]:
                bad.append(f"{rel}:{line}: {own} (layer {RANK[own]}) imports {target} (layer {RANK[other]})")
    return bad


def test_every_import_goes_down_the_layers() -> None:
    assert violations() == []


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    pkg = tmp_path / "servepack"
    (pkg / "bench").mkdir(parents=True)
    (pkg / "bench" / "x.py").write_text("from servepack.session import open_session\nimport servepack.smoke.runner\n")
    (pkg / "engine").mkdir()
    (pkg / "engine" / "y.py").write_text("from servepack import records\nfrom servepack.engine import base\n")
    found = violations(pkg)
    assert len(found) == 3
    assert any("bench/x.py:1" in v and "servepack.session" in v for v in found)
    assert any("bench/x.py:2" in v and "servepack.smoke.runner" in v for v in found)
    assert any("engine/y.py:1" in v and "servepack.records" in v for v in found)
