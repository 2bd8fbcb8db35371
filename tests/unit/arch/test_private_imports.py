"""Issue 31 item 5: no module of servepack imports another module's private name (`from servepack.x import _name`,
relative or absolute, one name or a parenthesised list): a name used by two modules is public, in the module it
belongs to. The wrong answer: a package made here that does each form must be caught, and the public forms not."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[3] / "src"


def _module_of(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def private_imports(root: Path, package: str) -> list[str]:
    """`file:line: from MODULE import _NAME` for each private name a module of `package` (under `root`) imports from
    another module of it; dunder names (`__version__`) are public."""
    found = []
    for path in sorted((root / package).rglob("*.py")):
        here = _module_of(path, root)
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:  # relative: resolved against this module's package
                base = here.split(".") if is_package else here.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module != package and not module.startswith(package + "."):
                continue
            for alias in node.names:
                name = alias.name
                if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: from {module} import {name}")
    return found


def test_no_module_imports_another_modules_private_name() -> None:
    assert private_imports(SRC, "servepack") == []


def test_every_form_of_a_private_import_is_caught(tmp_path: Path) -> None:
    pkg = tmp_path / "pkgx"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '1'\n")
    (pkg / "a.py").write_text("def _helper() -> int:\n    return 1\n\n\ndef helper() -> int:\n    return 2\n")
    (pkg / "sub" / "__init__.py").write_text("from ..a import _helper\n")
    (pkg / "sub" / "b.py").write_text(
        "import os\nfrom os.path import join as _join\nfrom pkgx import __version__\nfrom pkgx.a import helper\n"
        "from pkgx.a import _helper\nfrom pkgx.a import (\n    helper as h,\n    _helper as quiet,\n)\n"
        "from . import _sibling\nfrom .. import a\nimport pkgx.a\n")
    got = private_imports(tmp_path, "pkgx")
    assert got == ["pkgx/sub/__init__.py:1: from pkgx.a import _helper",
                   "pkgx/sub/b.py:5: from pkgx.a import _helper",
                   "pkgx/sub/b.py:6: from pkgx.a import _helper",
                   "pkgx/sub/b.py:10: from pkgx.sub import _sibling"]
