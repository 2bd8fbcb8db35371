"""servepack's BFCL AST rules against the upstream checker of the installed bfcl-eval wheel, on its own data.

Every entry of every single-turn AST category (Python, Java, JavaScript, live) is judged by both on the same
decoded calls: the answer built from the possible answer, and mutations of it (a parameter dropped, a wrong
value, a wrong type, a value written another way, an unexpected parameter, a wrong name, a call missing). The
verdicts must agree. The tools sent for every entry of every category are upstream's own conversion for
OpenAI-compatible function-calling models. Runs only where the wheel is installed (`pip install --no-deps
bfcl-eval==2026.3.23`, as the dev setup does); its model table and the parsers' dependencies are stubbed for the
test's length, since importing them needs the providers' SDKs.
"""

from __future__ import annotations

import copy
import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from servepack.smoke.bfcl import data as bfcl_data
from servepack.smoke.bfcl.checker import check
from servepack.smoke.bfcl.data import BfclEntry, kind, language, openai_name

pytestmark = pytest.mark.skipif(importlib.util.find_spec("bfcl_eval") is None,
                                reason="bfcl-eval not installed (pip install --no-deps bfcl-eval==2026.3.23)")
AST = [c for c in bfcl_data.CATEGORIES if kind(c) == "ast"]
Upstream = Callable[[BfclEntry, list[dict[str, Any]]], bool | None]


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    class _Models(dict[str, Any]):
        def __missing__(self, key: str) -> Any:
            return types.SimpleNamespace(underscore_to_dot=True)

    saved = sys.modules.get("bfcl_eval.constants.model_config")
    sys.modules["bfcl_eval.constants.model_config"] = types.SimpleNamespace(  # type: ignore[assignment]
        MODEL_CONFIG_MAPPING=_Models())
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    langs = {"python": Language.PYTHON, "java": Language.JAVA, "javascript": Language.JAVASCRIPT}

    def judge(entry: BfclEntry, calls: list[dict[str, Any]]) -> bool | None:
        try:
            result = ast_checker(copy.deepcopy(entry.functions), copy.deepcopy(calls),
                                 copy.deepcopy(entry.ground_truth), langs[language(entry.category)],
                                 entry.category, "servepack-FC")
        except Exception:  # upstream raises on a few shapes (e.g. a non-string where Java expects one)
            return None
        return bool(result["valid"])

    yield judge
    if saved is None:
        sys.modules.pop("bfcl_eval.constants.model_config", None)
    else:
        sys.modules["bfcl_eval.constants.model_config"] = saved


def _java(v: Any, declared: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        items = ", ".join(_java(x, "") if not isinstance(x, str) else f'"{x}"' for x in v)
        return f"new ArrayList<>(Arrays.asList({items}))" if declared == "ArrayList" else f"new int[]{{{items}}}"
    if isinstance(v, dict):
        puts = " ".join(f'put("{k}", {_java(x[0] if isinstance(x, list) and x else x, "")});' for k, x in v.items())
        return f"new HashMap<String, Object>() {{{{ {puts} }}}}"
    if declared == "long":
        return f"{v}L"
    if declared == "float":
        return f"{v}f"
    return str(v)


def _js(v: Any, declared: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(f"'{x}'" if isinstance(x, str) else _js(x, "") for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_js(x[0] if isinstance(x, list) and x else x, '')}" for k, x in v.items()) + "}"
    if declared == "Bigint":
        return f"{v}n"
    return str(v)


def _written(v: Any, declared: str, lang: str) -> Any:
    return v if lang == "python" else (_java if lang == "java" else _js)(v, declared)


def _wrong(v: Any) -> Any:
    if isinstance(v, bool):
        return not v
    if isinstance(v, int | float):
        return v + 7
    if isinstance(v, str):
        return v + " zz"
    if isinstance(v, list):
        return v[:-1] if v else ["zz"]
    if isinstance(v, dict):
        return {}
    return v


def _calls(entry: BfclEntry) -> Iterator[list[dict[str, Any]]]:
    """The answer built from the possible answer, then its mutations."""
    lang = language(entry.category)
    docs = {d["name"]: d for d in entry.functions}
    base = []
    for answer in entry.ground_truth:
        name, accepted = next(iter(answer.items()))
        props = ((docs.get(name) or {}).get("parameters") or {}).get("properties") or {}
        params = {p: _written(next(v for v in vs if v != ""), str(props.get(p, {}).get("type")), lang)
                  for p, vs in accepted.items() if any(v != "" for v in vs)}
        base.append({openai_name(name): params})
    yield base
    yield base[::-1]
    yield base[:-1]
    yield [{"zz_" + next(iter(c)): next(iter(c.values()))} for c in base]
    for i, call in enumerate(base):
        name, params = next(iter(call.items()))
        accepted = next(iter(entry.ground_truth[i].values()))
        for p, v in params.items():
            for changed in ({k: x for k, x in params.items() if k != p}, {**params, p: _wrong(v)},
                            {**params, p: json.dumps(v)}, {**params, p: str(v).upper()},
                            {**params, p: [v]}, {**params, "zz_extra": 1}):
                yield [*base[:i], {name: changed}, *base[i + 1:]]
            for option in accepted.get(p, [])[1:3]:
                if option != "":
                    yield [*base[:i], {name: {**params, p: _written(option, "", lang)}}, *base[i + 1:]]


@pytest.mark.parametrize("category", AST)
def test_servepack_agrees_with_the_upstream_checker(upstream: Upstream, category: str) -> None:
    entries = bfcl_data.load_category(category)
    compared, disagree, passed = 0, [], 0
    for entry in entries:
        for calls in _calls(entry):
            theirs = upstream(entry, calls)
            if theirs is None:
                continue
            ours = check(entry, calls) is None
            compared += 1
            passed += ours
            if ours != theirs:
                disagree.append((entry.id, calls, ours, theirs))
    assert compared >= 5 * len(entries) and 0 < passed < compared
    assert not disagree, f"{len(disagree)} of {compared} differ; first: {disagree[:3]}"


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda self, *a, **k: None,
                               "__getattr__": lambda self, n: (lambda *a, **k: None)})


class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stand-ins for what upstream's tool conversion imports but never uses here (parsers, retries, locks)."""

    names = ("tenacity", "tree_sitter", "tree_sitter_java", "tree_sitter_javascript", "filelock", "dotenv",
             "overrides")

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def test_the_tools_sent_are_upstreams_conversion_for_every_entry(upstream: Upstream) -> None:
    stubs, before = _Stubs(), set(sys.modules)
    sys.meta_path.insert(0, stubs)
    try:
        from bfcl_eval.constants.enums import ModelStyle
        from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
        from bfcl_eval.model_handler.utils import convert_to_tool
        from bfcl_eval.utils import _func_doc_language_specific_pre_processing

        differ, n = [], 0
        for category in bfcl_data.CATEGORIES:
            for entry in bfcl_data.load_category(category):
                docs = _func_doc_language_specific_pre_processing(copy.deepcopy(entry.functions), category)
                theirs = convert_to_tool(docs, GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS)
                n += 1
                if theirs != entry.tools:
                    differ.append(entry.id)
    finally:
        sys.meta_path.remove(stubs)
        for name in set(sys.modules) - before:
            if name.split(".")[0] in (*_Stubs.names, "bfcl_eval"):
                del sys.modules[name]
    assert n == sum(len(bfcl_data.load_category(c)) for c in bfcl_data.CATEGORIES) > 3000
    assert not differ, f"{len(differ)} entries' tools differ, e.g. {differ[:5]}"
