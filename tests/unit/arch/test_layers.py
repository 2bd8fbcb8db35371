"""Imports only go down the layers (ARCHITECTURE.md): a module never imports a higher layer or a sibling area."""

from __future__ import annotations

import ast
from pathlib import Path

import servepack

ROOT = Path(servepack.__file__).parent

# Lowest first. Areas on one rank may not import each other (bench and smoke are independent measurers).
LAYERS: list[set[str]] = [
    {"__init__", "errors", "progress", "strict"},
    {"settings", "store", "net", "safepath", "testing"},
    {"packs"},
    {"host", "weights", "redact"},
    {"engine"},
    {"bench", "smoke"},
    {"records"},
    {"tune", "registry", "reproduce"},
    {"report"},
    {"session"},
    {"pipeline", "doctor"},
    {"cli"},
]
# A part of an area ranked on its own, below the rest of its area (which may import it; it may not import the rest):
# its rank given explicitly, between two layers above. `registry.format` (the registry's record format, its checks
# and the lab's render) sits below `bench` so that records, bench and pipeline can read a record; the rest of
# `registry` (export, database, choose, import) stays at its layer.
# An area may also be ranked between two layers: `reproduce` (7½) sits above the rest of `registry`, so that its one
# run-vs-record judgement names this host's GPU as the registry's catalog does; nothing in `registry` imports it.
# `plan` (6½), the resolve half of a run, sits above `records` (it asks the claim policy before a launch) and below
# `session`, `pipeline` and `doctor`, which open it or show it; it needs nothing of `tune`, `registry` or `report`.
SUB_RANKS: dict[str, float] = {
    "registry.format": 4.5,
    "plan": 6.5,
    "reproduce": 7.5,
}
RANK: dict[str, float] = {area: i for i, areas in enumerate(LAYERS) for area in areas} | SUB_RANKS


def _area(module: str) -> str:
    """The area a module belongs to: a ranked part (`registry.format`) where it is inside one, else its area."""
    parts = module.split(".")
    if len(parts) > 2 and f"{parts[1]}.{parts[2]}" in SUB_RANKS:
        return f"{parts[1]}.{parts[2]}"
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
        own = _area(".".join(("servepack", *rel.with_suffix("").parts)))
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


def test_a_ranked_part_imports_only_down_and_its_area_may_import_it(tmp_path: Path) -> None:
    pkg = tmp_path / "servepack"
    (pkg / "registry" / "format").mkdir(parents=True)
    (pkg / "records").mkdir()
    (pkg / "bench").mkdir()
    # the format part importing the rest of its own area, or records (above it), goes up
    (pkg / "registry" / "format" / "record.py").write_text(
        "from servepack.registry.db import RegistryDB\nfrom servepack.records.claims import RunView\n"
        "from servepack.redact import scrub_message\nfrom servepack.errors import UsageError\n")
    # records and bench reading the format part go down; bench importing the rest of registry goes up
    (pkg / "records" / "compare.py").write_text("from servepack.registry.format import LoadedRecord\n")
    (pkg / "bench" / "x.py").write_text(
        "from servepack.registry.format.record import LoadedRecord\nfrom servepack.registry.export import schema\n")
    (pkg / "registry" / "db.py").write_text("from servepack.registry.format import parse_record\n")
    found = violations(pkg)
    assert len(found) == 3, found
    assert any("registry/format/record.py:1" in v and "servepack.registry.db" in v for v in found)
    assert any("registry/format/record.py:2" in v and "servepack.records.claims" in v for v in found)
    assert any("bench/x.py:2" in v and "servepack.registry.export" in v for v in found)


def test_reproduce_sits_above_registry_and_below_report(tmp_path: Path) -> None:
    pkg = tmp_path / "servepack"
    for area in ("reproduce", "registry", "report", "tune"):
        (pkg / area).mkdir(parents=True)
    # the judgement reading the registry's catalog goes down; report reading the judgement goes down
    (pkg / "reproduce" / "verdict.py").write_text("from servepack.registry.export.hardware import catalog_gpu_id\n")
    (pkg / "report" / "x.py").write_text("from servepack.reproduce.verdict import judge_run\n")
    # the registry, or tune (still layer 7), reading reproduce goes up
    (pkg / "registry" / "db.py").write_text("from servepack.reproduce.verdict import judge_run\n")
    (pkg / "tune" / "t.py").write_text("from servepack.reproduce.protocol import RecordFacts\n")
    found = violations(pkg)
    assert len(found) == 2, found
    assert any("registry/db.py:1" in v and "(layer 7.5)" in v for v in found)
    assert any("tune/t.py:1" in v and "(layer 7.5)" in v for v in found)


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_cycles(root: Path = ROOT) -> list[list[str]]:
    """Modules that import each other, directly or round a loop; imports inside functions count too.

    `from servepack.x import y` where `y` is a module is an import of that module (not of the package `x`).
    """
    paths = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & paths.keys()
                deps |= subs or ({node.module} & paths.keys())
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names} & paths.keys()
        graph[name] = deps - {name}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            cur = todo.pop()
            if cur == goal:
                return True
            if cur not in seen:
                seen.add(cur)
                todo += graph.get(cur, ())
        return False

    cycles: list[list[str]] = []
    for name in sorted(graph):
        loop = sorted(m for m in graph if m == name or (reaches(name, m) and reaches(m, name)))
        if len(loop) > 1 and loop not in cycles:
            cycles.append(loop)
    return cycles


def test_no_two_modules_import_each_other() -> None:
    assert import_cycles() == []


def test_the_check_catches_a_cycle_through_a_lazy_import(tmp_path: Path) -> None:
    pkg = tmp_path / "servepack"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "engine" / "build.py").write_text("from servepack.engine.locate import version_text\n")
    (pkg / "engine" / "locate.py").write_text("def f():\n    from servepack.engine.build import record\n")
    (pkg / "engine" / "record.py").write_text("from servepack.engine import build\n")  # reaches the loop only
    assert import_cycles(pkg) == [["servepack.engine.build", "servepack.engine.locate"]]
