"""The shape of the code, for issue 31's before/after: lines per area, the longest functions, private names imported
across modules, files over 400 lines, modules named nowhere (tests/unit/arch/test_module_map.py's rule).

    python3 benchmarks/code_shape.py [SRC]        # SRC defaults to this checkout's src/servepack

Only the standard library: it reads the source, it imports nothing of servepack, so it runs on any revision
(`git worktree add /tmp/old REV && python3 benchmarks/code_shape.py /tmp/old/src/servepack`).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path


def _modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _area(root: Path, path: Path) -> str:
    rel = path.relative_to(root)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 else rel.stem


def _functions(tree: ast.AST) -> list[tuple[int, str, int]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
            out.append((node.end_lineno - node.lineno + 1, node.name, node.lineno))
    return out


def _private_imports(tree: ast.AST) -> list[str]:
    return [f"{node.module}.{a.name}" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("servepack")
            for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1] / "src" / "servepack"
    lines: Counter[str] = Counter()
    files: Counter[str] = Counter()
    longest: list[tuple[int, str]] = []
    private: list[str] = []
    big: list[tuple[int, str]] = []
    for path in _modules(root):
        text = path.read_text()
        n = text.count("\n")
        rel = path.relative_to(root).as_posix()
        area = _area(root, path)
        lines[area] += n
        files[area] += 1
        if n > 400:
            big.append((n, rel))
        tree = ast.parse(text)
        longest += [(length, f"{rel}:{line} {name}") for length, name, line in _functions(tree)]
        private += [f"{rel}: {name}" for name in _private_imports(tree)]
    print(f"source: {root}")
    print(f"total: {sum(lines.values()):,} lines in {sum(files.values())} modules")
    print("lines per area:")
    for area, n in lines.most_common():
        print(f"  {area:12s} {n:6,} lines  {files[area]:3d} modules")
    print("longest functions:")
    for length, where in sorted(longest, reverse=True)[:10]:
        print(f"  {length:4d} lines  {where}")
    print(f"private names imported across modules: {len(private)}")
    for name in private:
        print(f"  {name}")
    print(f"files over 400 lines: {len(big)}")
    for n, rel in sorted(big, reverse=True):
        print(f"  {n:5d}  {rel}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
