"""BFCL's AST rules for one response, as its leaderboard applies them to function-calling models.

Decoding: the response's native `tool_calls`, each read as `{name: json.loads(arguments)}`. No native call,
or arguments that are not a JSON string of an object, is a decode failure: an AST case fails (`BFCL_DECODE`) and an
irrelevance case passes, exactly as BFCL counts it; a call whose name is null still decodes (a call).

Checking one call against one possible answer `{function: {param: [accepted values]}}`:
1. the call names the function (its OpenAI name, `.` → `_`), else BFCL_WRONG_FUNC_NAME;
2. every parameter the doc marks required is present, else BFCL_MISSING_REQUIRED;
3. every parameter given is in the doc and in the possible answer, else BFCL_UNEXPECTED_PARAM;
4. its Python type is the doc's (`integer` int, `float` float with an int accepted, `boolean` bool,
   `string` str, `array`/`tuple` list with item types checked one level deep, `dict` dict); a value of the
   possible answer's own type is accepted too (BFCL's "variable" rule); else BFCL_TYPE;
5. its value is among the accepted ones: strings compared after removing spaces and `,./-_*^`, lowercased,
   `'` as `"`; lists element-wise likewise (an optional `""` accepts `[]`); dicts key by key; lists of
   dicts in order (an optional `""` accepts `[]`); else BFCL_VALUE;
6. a parameter the possible answer lists without `""` among its values must be given, else BFCL_MISSING_OPTIONAL.
Categories: simple and multiple want exactly one call (multiple: among several offered functions);
parallel and parallel_multiple want exactly as many calls as answers, matched in any order, each expected
call taking the first unmatched call that passes (else BFCL_NO_MATCH); a count mismatch is BFCL_WRONG_COUNT.
Irrelevance passes when nothing decodes as a call, else BFCL_IRRELEVANT_CALL; relevance passes when something
does, else BFCL_NO_CALL. Live categories take the same rules as their non-live namesakes. simple_java and
simple_javascript take each parameter as a string in that language, read by `langs` before rules 4-5 (no int
for float there); a value that is not a string is BFCL_TYPE.
"""

from __future__ import annotations

import json
import re
from typing import Any

from servepack.smoke.bfcl.data import BfclEntry, canonical, kind, language, openai_name
from servepack.smoke.bfcl.langs import JAVA_TYPES, JS_TYPES, java_value, js_value

CHECKER_VERSION = "1.1"  # 1.1: "" matched by [] in lists of dicts; null names are calls; Java, JS, live
Problem = tuple[str, str]  # (code, message)
_PY_TYPES: dict[str, type] = {
    "string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list,
    "dict": dict, "any": str,
}
_STANDARDIZE = re.compile(r"[ ,./\-_*^]")


def decode(message: dict[str, Any]) -> list[dict[Any, Any]] | None:
    """`[{name: params}, ...]` from native tool calls as BFCL's FC decoder reads them, or None where it fails.

    As upstream: the name is taken as it is (a null name is still a call: irrelevance counts it); the arguments
    must be a JSON string of an object."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return None
    out = []
    for c in calls:
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
            return None
        name = fn.get("name")
        if isinstance(name, list | dict):
            return None  # not a key BFCL's decoder could build a call from
        try:
            params = json.loads(fn["arguments"])
        except json.JSONDecodeError:
            return None
        if not isinstance(params, dict):
            return None  # not the function-calling format upstream's checkers take as a call
        out.append({name: params})
    return out


def standardize(text: str) -> str:
    return _STANDARDIZE.sub("", text).lower().replace("'", '"')


def check(entry: BfclEntry, calls: list[dict[Any, Any]] | None) -> Problem | None:
    """None when `calls` (decoded, or None) pass the entry's category rules; else the first problem."""
    category = canonical(entry.category)
    how = kind(category)
    if how == "irrelevance":
        if calls:
            return "BFCL_IRRELEVANT_CALL", f"called {[next(iter(c)) for c in calls]} although no function fits"
        return None
    if how == "relevance":
        return None if calls else ("BFCL_NO_CALL", "expected a function call; none could be decoded")
    if calls is None:
        return "BFCL_DECODE", "no function call could be decoded (no native tool call, or arguments not a JSON object)"
    answers = entry.ground_truth
    lang = language(category)
    if len(calls) != len(answers):
        return "BFCL_WRONG_COUNT", f"{len(calls)} calls, expected {len(answers)}"
    if "parallel" not in category:
        return check_call(_doc(entry, answers[0]), calls[0], answers[0], lang)
    matched: set[int] = set()
    for answer in answers:
        doc = _doc(entry, answer)
        last: Problem | None = None
        for i, call in enumerate(calls):
            if i in matched:
                continue
            last = check_call(doc, call, answer, lang)
            if last is None:
                matched.add(i)
                break
        if last is not None:
            return "BFCL_NO_MATCH", f"no call matches {next(iter(answer))}: {last[1]}"
    return None


def _doc(entry: BfclEntry, answer: dict[str, Any]) -> dict[str, Any]:
    name = next(iter(answer))
    return next((f for f in entry.functions if f["name"] == name), entry.functions[0])


def check_call(doc: dict[str, Any], call: dict[Any, Any], answer: dict[str, Any],
               lang: str = "python") -> Problem | None:
    """One decoded call `{name: params}` against one possible answer, by rules 1-6 of the module doc."""
    expected = openai_name(doc["name"])
    accepted: dict[str, list[Any]] = next(iter(answer.values()))
    if expected not in call:
        return "BFCL_WRONG_FUNC_NAME", f"called {list(call)}, expected {expected!r}"
    params: dict[str, Any] = call[expected]
    spec = doc.get("parameters") or {}
    props: dict[str, Any] = spec.get("properties") or {}
    for name in spec.get("required") or []:
        if name not in params:
            return "BFCL_MISSING_REQUIRED", f"{expected}: missing required {name!r}"
    for name, value in params.items():
        if name not in props or name not in accepted:
            return "BFCL_UNEXPECTED_PARAM", f"{expected}: unexpected parameter {name!r}"
        problem = _check_param(f"{expected}.{name}", props[name], value, accepted[name], lang)
        if problem:
            return problem
    for name, values in accepted.items():
        if name not in params and "" not in values:
            return "BFCL_MISSING_OPTIONAL", f"{expected}: {name!r} left out; the answer needs one of {values}"
    return None


def _answer_type(values: list[Any]) -> type | None:
    return next((type(v) for v in values if v != ""), None)


def _type_ok(value: Any, wanted: type, values: list[Any], item_type: type | None) -> tuple[bool, bool]:
    """(type passes, the value is a 'variable': of the possible answer's type rather than the doc's)."""
    answer_type = _answer_type(values)
    variable = answer_type is not None and answer_type is not wanted
    if type(value) is wanted:
        if item_type is None or not isinstance(value, list):
            return True, variable
        # Items are checked one level deep against the doc's item type or the option's own item type.
        for v in values:
            if not isinstance(v, list) or all(type(x) is item_type or type(x) is _answer_type(v) for x in value):
                return True, variable
        return False, variable
    if answer_type is not None and type(value) is answer_type:
        return True, True
    return False, variable


_LISTS = {"java": ("Array", "ArrayList"), "javascript": ("array",)}


def _typed(prop: dict[str, Any], value: Any, lang: str) -> tuple[Any, type, type | None, str | None]:
    """(the value as the checker compares it, the doc's Python type, the items' Python type, a type error or None).

    Python values come as JSON gives them (an int where a float is declared is read as a float); a Java or
    JavaScript value must be a string, read by `langs` for its declared type."""
    declared = str(prop.get("type", "string"))
    item = str((prop.get("items") or {}).get("type", "string"))
    if lang == "python":
        if declared == "float" and type(value) is int:
            value = float(value)
        item_type = _PY_TYPES.get(item, str) if declared in ("array", "tuple") else None
        return value, _PY_TYPES.get(declared, str), item_type, None
    table = JAVA_TYPES if lang == "java" else JS_TYPES
    if declared not in table:
        return value, str, None, None
    if type(value) is not str:
        error = f"expected a {lang} {declared} written as a string, got {type(value).__name__} {value!r}"
        return value, str, None, error
    is_list = declared in _LISTS[lang]
    read = java_value if lang == "java" else js_value
    value = read(value, declared, item if is_list else None)
    return value, table[declared], (table.get(item, str) if is_list else None), None


def _check_param(where: str, prop: dict[str, Any], value: Any, values: list[Any], lang: str) -> Problem | None:
    value, wanted, item_type, error = _typed(prop, value, lang)
    if error:
        return "BFCL_TYPE", f"{where}: {error}"[:300]
    ok, variable = _type_ok(value, wanted, values, item_type)
    if not ok:
        return "BFCL_TYPE", f"{where}: expected {prop.get('type')}, got {type(value).__name__} {value!r}"[:300]
    if not variable:
        if wanted is dict:
            return _dict_problem(where, value, values)
        if wanted is list and item_type is dict:
            return _list_dict_problem(where, value, values)
        if wanted is str:
            ok = standardize(value) in [standardize(v) for v in values if isinstance(v, str)]
            return None if ok else ("BFCL_VALUE", f"{where}: {value!r} not among {values}"[:300])
        if wanted is list:
            got = [standardize(x) if isinstance(x, str) else x for x in value]
            # An optional "" stands for an empty list here, as in BFCL's list check.
            options = [[standardize(x) if isinstance(x, str) else x for x in v] if isinstance(v, list) else []
                       for v in values if isinstance(v, list) or v == ""]
            return None if got in options else ("BFCL_VALUE", f"{where}: {value!r} not among {values}"[:300])
    if value not in values:
        return "BFCL_VALUE", f"{where}: {value!r} not among {values}"[:300]
    return None


def _dict_matches(value: dict[str, Any], option: dict[str, Any]) -> bool:
    for key, v in value.items():
        if key not in option:
            return False
        got = standardize(v) if isinstance(v, str) else v
        allowed = [standardize(a) if isinstance(a, str) else a for a in option[key]]
        if got not in allowed:
            return False
    return all(key in value or "" in allowed for key, allowed in option.items())


def _dict_problem(where: str, value: dict[str, Any], values: list[Any]) -> Problem | None:
    if any(isinstance(o, dict) and _dict_matches(value, o) for o in values):
        return None
    return "BFCL_VALUE", f"{where}: {value!r} matches none of {values}"[:300]


def _list_dict_problem(where: str, value: list[Any], values: list[Any]) -> Problem | None:
    for option in values:
        if option == "" and not value:
            return None  # an optional list of dicts: [] stands for leaving it out, as in BFCL's list-of-dicts check
        if not isinstance(option, list) or len(option) != len(value):
            continue
        pairs = zip(value, option, strict=True)
        if all(isinstance(v, dict) and isinstance(o, dict) and _dict_matches(v, o) for v, o in pairs):
            return None
    return "BFCL_VALUE", f"{where}: {value!r} matches none of {values}"[:300]
