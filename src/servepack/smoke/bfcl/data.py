"""BFCL's own test data, read from the `bfcl-eval` wheel, and its function docs as OpenAI tools.

The wheel ships `bfcl_eval/data/BFCL_v4_<file>.json` (one JSON object per line: id, question turns,
function docs) and `possible_answer/BFCL_v4_<file>.json` (id, ground_truth). Only the files are read:
the package is located without importing it, so its heavy runtime dependencies need not be installed
(`pip install --no-deps bfcl-eval`).

Function docs are turned into tools the way BFCL does for OpenAI-compatible function-calling models: the
category's language hint appended to each description (Java and JavaScript parameters become strings holding
the value in that language, the declared type said in the description), `.` in names replaced by `_` (OpenAI
names allow neither), parameter types mapped to JSON Schema (`dict`→object, `float`→number with format float
and a note in the description, `tuple`→array, Java's and JavaScript's names for nested items likewise, `any`
and unknown types→string), nested item and property types likewise.
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
# BFCL v4's single-turn categories, named as its files and ids name them (`simple_python_0`, `live_simple_0-0-0`).
CATEGORIES = (
    "simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple", "irrelevance",
    "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_relevance", "live_irrelevance",
)
# BFCL v4's multi-turn categories (smoke.bfcl.multi_turn: executed, judged by state and response).
MT_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
# Names earlier runs recorded (servepack's first BFCL suite called simple_python "simple").
ALIASES = {"simple": "simple_python"}
DEFAULT_SUBSET = 20
_HINTS = {"python": " Note that the provided function is in Python 3 syntax.",
          "java": " Note that the provided function is in Java 8 SDK syntax.",
          "javascript": " Note that the provided function is in JavaScript syntax."}
PYTHON_HINT = _HINTS["python"]
# BFCL's type names (Python, Java and JavaScript docs) as JSON Schema types; anything else is a string.
_TYPE_MAP = {
    "integer": "integer", "number": "number", "float": "number", "string": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "dict": "object", "object": "object",
    "tuple": "array", "any": "string", "byte": "integer", "short": "integer", "long": "integer",
    "double": "number", "char": "string", "ArrayList": "array", "Array": "array", "HashMap": "object",
    "Hashtable": "object", "Queue": "array", "Stack": "array", "Any": "string", "String": "string",
    "Bigint": "integer",
}


def canonical(category: str) -> str:
    """A category's BFCL name (an alias an earlier run recorded becomes the name it stood for)."""
    return ALIASES.get(category, category)


def language(category: str) -> str:
    """The language whose type rules judge a category: java, javascript or python (as BFCL tells them apart)."""
    if "javascript" in category:
        return "javascript"
    return "java" if "java" in category else "python"


def kind(category: str) -> str:
    """How a category is judged: 'irrelevance' (no call passes), 'relevance' (any call passes) or 'ast'."""
    if "irrelevance" in category:
        return "irrelevance"
    return "relevance" if "relevance" in category else "ast"


def category_of_id(entry_id: str) -> str:
    """The category an entry id names: `simple_java_3` → simple_java, `live_simple_0-0-0` → live_simple."""
    return entry_id.rsplit("_", 1)[0]


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
        return to_openai_tools(self.functions, self.category)


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


def read_lines(path: Path) -> list[dict[str, Any]]:
    """A BFCL data file of JSON lines; UsageError naming the reinstall when it is missing or broken."""
    if not path.is_file():
        raise UsageError(f"BFCL data file missing: {path}; reinstall with {INSTALL_HINT}")
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not BFCL JSON lines ({exc}); reinstall with {INSTALL_HINT}") from None


def category_files(category: str) -> list[Path]:
    root = data_dir()
    files = [root / f"BFCL_v4_{category}.json"]
    if kind(category) == "ast":
        files.append(root / "possible_answer" / f"BFCL_v4_{category}.json")
    return files


def load_category(category: str) -> list[BfclEntry]:
    """Every entry of one category, in file order, joined with its possible answer."""
    category = canonical(category)
    if category not in CATEGORIES:
        raise UsageError(f"no BFCL category {category!r}; known: {', '.join(CATEGORIES)}")
    files = category_files(category)
    questions = read_lines(files[0])
    answers = {a["id"]: a.get("ground_truth", []) for a in read_lines(files[1])} if len(files) > 1 else {}
    out = []
    for q in questions:
        if len(files) > 1 and q["id"] not in answers:
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


def _language_hints(doc: dict[str, Any], lang: str) -> None:
    """BFCL's language-specific rewrite of one doc: a hint in the description; for Java and JavaScript every
    parameter becomes a string holding the value written in that language, its type said in its description."""
    doc["description"] = doc.get("description", "") + _HINTS[lang]
    if lang == "python":
        return
    title = "Java" if lang == "java" else "JavaScript"
    lists = ("ArrayList", "Array") if lang == "java" else ("array",)
    for prop in ((doc.get("parameters") or {}).get("properties") or {}).values():
        declared = prop.get("type")
        if declared == "any":
            prop["description"] = prop.get("description", "") + (
                f" This parameter can be of any type of {title} object in string representation.")
        else:
            prop["description"] = prop.get("description", "") + (
                f" This is {title} {declared} type parameter in string representation.")
        if declared in lists:
            prop["description"] += (f" The list elements are of type {(prop.get('items') or {}).get('type')}; "
                                    "they are not in string representation.")
            prop.pop("items", None)
        if lang == "javascript" and declared == "dict" and "properties" in prop:
            prop["description"] += (" The dictionary entries have the following schema; they are not in string "
                                    f"representation. {json.dumps(prop.pop('properties'))}")
        prop["type"] = "string"


def to_openai_tools(functions: list[dict[str, Any]], category: str = "simple_python") -> list[dict[str, Any]]:
    """BFCL function docs as OpenAI chat-completions tools, converted as BFCL converts them for a category."""
    tools = []
    for doc in copy.deepcopy(functions):
        _language_hints(doc, language(canonical(category)))
        doc["name"] = openai_name(doc["name"])
        params = doc.setdefault("parameters", {})
        params["type"] = "object"
        params["properties"] = _cast_properties(params.get("properties") or {})
        tools.append({"type": "function", "function": doc})
    return tools
