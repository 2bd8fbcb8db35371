"""BFCL's own test data, read from the `bfcl-eval` wheel, and its function docs as OpenAI tools.

The wheel ships `bfcl_eval/data/BFCL_v4_<file>.json` (one JSON object per line: id, question turns,
function docs) and `possible_answer/BFCL_v4_<file>.json` (id, ground_truth). Only the files are read:
the package is located without importing it, so its heavy runtime dependencies need not be installed
(`pip install --no-deps bfcl-eval`).

Function docs are turned into tools the way BFCL does for OpenAI-compatible function-calling models: the
Python-syntax hint appended to each description, `.` in names replaced by `_` (OpenAI names allow neither),
parameter types mapped to JSON Schema (`dict`→object, `float`→number with format float and a note in the
description, `tuple`→array, `any` and unknown types→string), nested item and property types likewise.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from servepack.errors import UsageError

BFCL_PIN = "bfcl-eval==2026.3.23"
INSTALL_HINT = f"pip install --no-deps {BFCL_PIN}"
# Our category name → BFCL's file stem (BFCL v4 splits "simple" by language; the Python one is used here).
CATEGORIES = {
    "simple": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
    "irrelevance": "irrelevance",
}
DEFAULT_SUBSET = 20
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."
_TYPE_MAP = {
    "integer": "integer", "number": "number", "float": "number", "string": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "dict": "object", "object": "object",
    "tuple": "array", "any": "string",
}


@dataclass(frozen=True)
class BfclEntry:
    """One BFCL test entry: the first turn's messages, its function docs, and the possible answer."""

    id: str
    category: str
    messages: list[dict[str, Any]]
    functions: list[dict[str, Any]]
    ground_truth: list[dict[str, Any]]

    @property
    def tools(self) -> list[dict[str, Any]]:
        return to_openai_tools(self.functions)


def data_dir() -> Path:
    """`bfcl_eval/data` of the installed wheel (found without importing the package)."""
    spec = importlib.util.find_spec("bfcl_eval")
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        folder = Path(root) / "data"
        if folder.is_dir():
            return folder
    raise UsageError(f"BFCL data not found: the bfcl-eval package is not installed; {INSTALL_HINT}")


def bfcl_version() -> str:
    try:
        return metadata.version("bfcl-eval")
    except metadata.PackageNotFoundError:
        return "unknown"


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise UsageError(f"BFCL data file missing: {path}; reinstall with {INSTALL_HINT}")
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not BFCL JSON lines ({exc}); reinstall with {INSTALL_HINT}") from None


def category_files(category: str) -> list[Path]:
    stem = CATEGORIES[category]
    root = data_dir()
    files = [root / f"BFCL_v4_{stem}.json"]
    if category != "irrelevance":
        files.append(root / "possible_answer" / f"BFCL_v4_{stem}.json")
    return files


def load_category(category: str) -> list[BfclEntry]:
    """Every entry of one category, in file order, joined with its possible answer."""
    if category not in CATEGORIES:
        raise UsageError(f"no BFCL category {category!r}; known: {', '.join(CATEGORIES)}")
    files = category_files(category)
    questions = _read_lines(files[0])
    answers = {a["id"]: a.get("ground_truth", []) for a in _read_lines(files[1])} if len(files) > 1 else {}
    out = []
    for q in questions:
        if category != "irrelevance" and q["id"] not in answers:
            raise UsageError(f"BFCL {category}: no possible answer for {q['id']}; reinstall with {INSTALL_HINT}")
        out.append(BfclEntry(id=q["id"], category=category, messages=list(q["question"][0]),
                             functions=q["function"], ground_truth=answers.get(q["id"], [])))
    return out


def subset(entries: list[BfclEntry], size: int | None) -> list[BfclEntry]:
    """A deterministic sample: the `size` entries whose sha256(id) is smallest, in file order (None: all)."""
    if size is None or size >= len(entries):
        return entries
    keep = set(sorted((hashlib.sha256(e.id.encode()).hexdigest(), e.id) for e in entries)[:size])
    ids = {i for _, i in keep}
    return [e for e in entries if e.id in ids]


def files_sha256(categories: list[str]) -> str:
    digest = hashlib.sha256()
    for category in categories:
        for path in category_files(category):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def openai_name(name: str) -> str:
    return name.replace(".", "_")


def _cast_properties(properties: dict[str, Any]) -> dict[str, Any]:
    for prop in properties.values():
        _cast(prop)
    return properties


def _cast(prop: dict[str, Any]) -> None:
    declared = prop.get("type")
    if declared == "float":
        prop["format"] = "float"
        prop["description"] = prop.get("description", "") + " This is a float type value."
    prop["type"] = _TYPE_MAP.get(declared, "string") if isinstance(declared, str) else "string"
    if isinstance(prop.get("properties"), dict):
        _cast_properties(prop["properties"])
    elif isinstance(prop.get("items"), dict) and prop["type"] in ("array", "object"):
        items = prop["items"]
        items["type"] = _TYPE_MAP.get(items.get("type", "string"), "string")
        if isinstance(items.get("properties"), dict):
            _cast_properties(items["properties"])
        elif isinstance(items.get("items"), dict):
            inner = items["items"]
            inner["type"] = _TYPE_MAP.get(inner.get("type", "string"), "string")


def to_openai_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """BFCL function docs as OpenAI chat-completions tools, converted as BFCL converts them."""
    tools = []
    for doc in copy.deepcopy(functions):
        doc["name"] = openai_name(doc["name"])
        doc["description"] = doc.get("description", "") + PYTHON_HINT
        params = doc.setdefault("parameters", {})
        params["type"] = "object"
        params["properties"] = _cast_properties(params.get("properties") or {})
        tools.append({"type": "function", "function": doc})
    return tools
