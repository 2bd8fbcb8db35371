"""BFCL's multi-turn categories: the entries, their tools turn by turn, and the calls executed in the sandbox.

Data (read from the `bfcl-eval` wheel's files, as `data` reads the single-turn ones): `BFCL_v4_<category>.json`
gives each entry's user turns, involved classes and initial config; `multi_turn_func_doc/<class file>.json` the
function docs of each class, offered in the entry's class order, converted as the single-turn tools are (Python
hint, OpenAI types). As upstream (bfcl-eval 2026.3.23) does: `excluded_function` is not applied (the wheel's own
pipeline ignores it); in miss_func a `missed_function` doc is held back (its first occurrence) and appended, without
the language hint, at its turn, whose user message is then upstream's "I have updated some more functions…";
long_context loads each class's scenario with `long_context=True`.

Execution: the wheel's own backend classes run in the sandbox Layer B uses (`smoke.sandbox.run_shell`: new
namespaces, no network, no host paths). Each run streams into the sandbox workspace a package skeleton (empty
`__init__`s) holding the backend modules copied from the wheel, our program `mt_backend.py` and a request, and reads
back `response.json`. A run replays the whole conversation from the initial config (the backends are deterministic:
their randomness is seeded by the scenario), so no process outlives a step.

A class whose module needs a package servepack does not carry cannot run in the sandbox (which has no
site-packages): its entries are skipped, with the reason, in the suite result's `skipped`.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servepack.errors import UsageError
from servepack.smoke import sandbox
from servepack.smoke.bfcl.data import (
    INSTALL_HINT,
    MT_CATEGORIES,
    PYTHON_HINT,
    data_dir,
    read_lines,
    to_openai_tools,
)
from servepack.smoke.sandbox.rootfs import RootFS

MAX_STEPS = 20  # upstream's MAXIMUM_STEP_LIMIT: a turn is cut off when a 21st round of calls has run
ADDED_FUNCTIONS_PROMPT = "I have updated some more functions you can choose from. What about now?"
_PREFIX = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
# class → (its module under func_source_code, its function-doc file), as the wheel's executable_backend_config.
CLASSES = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system.json"),
    "MathAPI": ("math_api", "math_api.json"),
    "MessageAPI": ("message_api", "message_api.json"),
    "TwitterAPI": ("posting_api", "posting_api.json"),
    "TicketAPI": ("ticket_api", "ticket_api.json"),
    "TradingBot": ("trading_bot", "trading_bot.json"),
    "TravelAPI": ("travel_booking", "travel_booking.json"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control.json"),
}
STATELESS = ("MathAPI",)
# Classes not run, and why: their module imports a package servepack does not install (the sandbox has none).
UNAVAILABLE = {"MathAPI": "MathAPI's backend imports mpmath, a package servepack does not carry (bfcl-eval is "
                          "installed with --no-deps and the sandbox has no site-packages)"}
_SHARED_MODULES = ("long_context",)  # imported by several backends
BACKEND_TIMEOUT_S = 60.0
_PROGRAM = Path(__file__).with_name("mt_backend.py")
_RESPONSE_LIMIT = 64 * 1024 * 1024

Call = dict[str, Any]  # {"name": str, "args": [...], "kwargs": {...}}


class BackendError(Exception):
    """The sandboxed backend run failed (refused, crashed, timed out); the message says how."""


@dataclass(frozen=True)
class MultiTurnEntry:
    """One multi-turn entry: its user turns, classes, initial config, function docs and ground truth."""

    id: str
    category: str
    turns: list[list[dict[str, Any]]]
    classes: list[str]
    initial_config: dict[str, Any]
    functions: list[dict[str, Any]]
    missed: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    ground_truth: list[list[str]] = field(default_factory=list)

    @property
    def long_context(self) -> bool:
        return "long_context" in self.category

    @property
    def unavailable(self) -> str | None:
        """Why this entry cannot run here, or None."""
        reasons = [UNAVAILABLE[c] for c in self.classes if c in UNAVAILABLE]
        return "; ".join(reasons) or None

    def user_messages(self, turn: int) -> list[dict[str, Any]]:
        """The messages that open a turn (a held-back function's turn: upstream's prompt for the added tools)."""
        if turn in self.missed:
            return [{"role": "user", "content": ADDED_FUNCTIONS_PROMPT}]
        return [dict(m) for m in self.turns[turn]]

    def tools_at(self, turn: int) -> list[dict[str, Any]]:
        """The tools offered during a turn: the entry's, plus every held-back doc whose turn has come."""
        tools = to_openai_tools(self.functions, self.category)
        for t in sorted(self.missed):
            if t <= turn:
                for tool in to_openai_tools(self.missed[t], self.category):
                    fn = tool["function"]
                    fn["description"] = fn["description"].removesuffix(PYTHON_HINT)
                    tools.append(tool)
        return tools

    def ground_truth_calls(self) -> list[list[Call]]:
        return [[parse_call(text) for text in turn] for turn in self.ground_truth]


def parse_call(text: str) -> Call:
    """A ground-truth call string (`cd(folder='x')`, `sort('f')`) as a call; UsageError when it is not one."""
    try:
        node = ast.parse(text, mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise ValueError("not a call of a plain name")
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
        if len(kwargs) != len(node.keywords):
            raise ValueError("** arguments")
    except (SyntaxError, ValueError) as exc:
        raise UsageError(f"BFCL ground truth {text!r} is not a call with literal arguments ({exc}); "
                         f"reinstall with {INSTALL_HINT}") from None
    return {"name": node.func.id, "args": args, "kwargs": kwargs}


def subset(entries: list[MultiTurnEntry], size: int | None) -> list[MultiTurnEntry]:
    """A deterministic sample, chosen as `data.subset` chooses: the smallest sha256(id), in file order."""
    if size is None or size >= len(entries):
        return entries
    ids = {i for _, i in sorted((hashlib.sha256(e.id.encode()).hexdigest(), e.id) for e in entries)[:size]}
    return [e for e in entries if e.id in ids]


def _doc_files() -> Path:
    folder = data_dir() / "multi_turn_func_doc"
    if not folder.is_dir():
        raise UsageError(f"BFCL multi-turn function docs missing: {folder}; reinstall with {INSTALL_HINT}")
    return folder


def _class_docs(cls: str) -> list[dict[str, Any]]:
    if cls not in CLASSES:
        raise UsageError(f"BFCL multi-turn: unknown backend class {cls!r}; servepack knows {', '.join(CLASSES)}")
    return read_lines(_doc_files() / CLASSES[cls][1])


def category_files(category: str) -> list[Path]:
    root = data_dir()
    return [root / f"BFCL_v4_{category}.json", root / "possible_answer" / f"BFCL_v4_{category}.json",
            *sorted(_doc_files().glob("*.json"))]


def files_sha256(categories: list[str]) -> str:
    """sha256 over the categories' data files, the function docs and the backend modules (what the verdicts ran)."""
    digest = hashlib.sha256()
    source = data_dir().parent / "eval_checker" / "multi_turn_eval" / "func_source_code"
    paths = [p for c in categories for p in category_files(c)[:2]] + category_files(categories[0])[2:]
    for path in [*paths, *sorted(source.glob("*.py")), _PROGRAM]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def load_category(category: str) -> list[MultiTurnEntry]:
    """Every entry of a multi-turn category, in file order, joined with its ground truth."""
    if category not in MT_CATEGORIES:
        raise UsageError(f"no BFCL multi-turn category {category!r}; known: {', '.join(MT_CATEGORIES)}")
    files = category_files(category)
    answers = {a["id"]: a.get("ground_truth", []) for a in read_lines(files[1])}
    docs: dict[str, list[dict[str, Any]]] = {}
    out = []
    for q in read_lines(files[0]):
        if q["id"] not in answers:
            raise UsageError(f"BFCL {category}: no ground truth for {q['id']}; reinstall with {INSTALL_HINT}")
        functions: list[dict[str, Any]] = []
        for cls in q["involved_classes"]:
            if cls not in docs:
                docs[cls] = _class_docs(cls)
            functions += copy.deepcopy(docs[cls])
        missed: dict[int, list[dict[str, Any]]] = {}
        for turn, names in (q.get("missed_function") or {}).items():
            held = missed.setdefault(int(turn), [])
            for name in names:
                i = next((i for i, f in enumerate(functions) if f["name"] == name), None)
                if i is not None:
                    held.append(functions.pop(i))
        out.append(MultiTurnEntry(id=q["id"], category=category, turns=q["question"], classes=q["involved_classes"],
                                  initial_config=q.get("initial_config") or {}, functions=functions, missed=missed,
                                  ground_truth=answers[q["id"]]))
    return out


def select(categories: list[str], size: int | None,
           case_ids: list[str] | None = None) -> tuple[list[MultiTurnEntry], dict[str, str]]:
    """(the entries to run, {entry id: why it is skipped}) of multi-turn categories, sampled as `data.subset`."""
    chosen: list[MultiTurnEntry] = []
    for category in categories:
        entries = load_category(category)
        chosen += [e for e in entries if e.id in case_ids] if case_ids else subset(entries, size)
    unknown = [i for i in case_ids or [] if i not in {e.id for e in chosen}]
    if unknown:
        raise UsageError(f"BFCL {', '.join(categories)}: no entry {', '.join(unknown)}; check --case ids")
    skipped = {e.id: reason for e in chosen if (reason := e.unavailable)}
    return [e for e in chosen if e.id not in skipped], skipped


def _skeleton(root: Path, classes: list[str]) -> None:
    """The backend modules of `classes` (and what they share) under root/pkg, in empty-`__init__` packages."""
    source = data_dir().parent / "eval_checker" / "multi_turn_eval" / "func_source_code"
    fs = RootFS(root)
    package = "pkg/" + _PREFIX.replace(".", "/")
    parts = package.split("/")
    for i in range(2, len(parts) + 1):
        fs.write_bytes("/".join(parts[:i]) + "/__init__.py", b"")
    for module in (*_SHARED_MODULES, *(CLASSES[c][0] for c in classes)):
        path = source / f"{module}.py"
        if not path.is_file():
            raise UsageError(f"BFCL backend module missing: {path}; reinstall with {INSTALL_HINT}")
        fs.write_bytes(f"{package}/{module}.py", path.read_bytes())


def execute(entry: MultiTurnEntry, model: list[list[list[Call]]],
            ground_truth: list[list[Call]] | None = None) -> list[dict[str, Any]]:
    """Run the model's calls (turn → step → call) and, when given, the ground truth's in one sandboxed process; the
    per-turn results (see mt_backend). BackendError when the sandbox does not give them."""
    request = {"modules": {c: f"{_PREFIX}.{CLASSES[c][0]}" for c in entry.classes}, "classes": entry.classes,
               "stateless": [c for c in entry.classes if c in STATELESS], "initial_config": entry.initial_config,
               "long_context": entry.long_context, "model": model, "ground_truth": ground_truth}
    with tempfile.TemporaryDirectory(prefix="servepack-bfcl-mt-") as tmp:
        root = Path(tmp)
        _skeleton(root, entry.classes)
        fs = RootFS(root)
        fs.write_bytes("run.py", _PROGRAM.read_bytes())
        fs.write_bytes("request.json", json.dumps(request).encode())
        result = sandbox.run_shell("python3 -I -S -B run.py", cwd=root, timeout_s=BACKEND_TIMEOUT_S)
        if result.refused is not None:
            raise BackendError(f"the sandbox refused the backend run: {result.refused}")
        if result.exit_code != 0 or result.killed:
            tail = (result.stderr.strip().splitlines() or [result.killed or "no output"])[-1]
            raise BackendError(f"the backend run failed ({result.killed or f'exit {result.exit_code}'}): {tail}"[:400])
        try:
            doc = json.loads(fs.read_bytes("response.json", _RESPONSE_LIMIT))
        except (OSError, ValueError) as exc:
            raise BackendError(f"the backend run left no readable response.json: {exc}") from None
    turns = doc.get("turns") if isinstance(doc, dict) else None
    if not isinstance(turns, list) or len(turns) != len(model):
        raise BackendError("the backend run's response.json does not hold one result per turn")
    return turns
