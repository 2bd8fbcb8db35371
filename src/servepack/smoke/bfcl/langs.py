"""BFCL's Java and JavaScript type rules: a value arrives as a string written in that language and is read into a
Python value before the AST rules compare it, as BFCL's checker does for simple_java and simple_javascript.

The rules, BFCL's own (quirks included, since the leaderboard's figures come from them):
- every Java or JavaScript parameter must arrive as a string; anything else is a type error;
- a string the declared type's pattern does not match stays the string it was (then judged as a "variable");
- Java: byte/short/integer `-?digits`; long the same with an `L`; float a decimal with an `f`; double a decimal
  (exponent allowed for both); boolean `true`/`false`; char and String and any as written; `new T[]{a, b}` for
  Array, `new ArrayList<>(Arrays.asList(a, b))` or `new ArrayList<>() {{ add(a); }}` for ArrayList (String and char
  items lose their first and last character), `new HashMap<…>() {{ put("k", v); }}` for HashMap;
- JavaScript: String loses its surrounding quotes; integer `-?digits`; float `-?digits[.digits]`; Bigint digits
  with an `n`; Boolean `true`/`false`; `[a, b]` or `new Array(a, b)` (and one level of nesting) for array;
  `{k: v, …}` for dict; any as written.
Items and values with no declared type are read by their look: true/false, a quoted string, a number, else the text.
"""

from __future__ import annotations

import re
from typing import Any

JAVA_TYPES: dict[str, type] = {
    "byte": int, "short": int, "integer": int, "float": float, "double": float, "long": int, "boolean": bool,
    "char": str, "Array": list, "ArrayList": list, "Set": set, "HashMap": dict, "Hashtable": dict, "Queue": list,
    "Stack": list, "String": str, "any": str,
}
JS_TYPES: dict[str, type] = {
    "String": str, "integer": int, "float": float, "Bigint": int, "Boolean": bool, "dict": dict, "array": list,
    "any": str,
}
# `^…$` with re.match, as BFCL writes them: a trailing newline is allowed (and int()/float() ignore it).
_INT = re.compile(r"^-?\d+$")
_JAVA_FLOAT = re.compile(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?[fF]$")
_JAVA_DOUBLE = re.compile(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?$")
_JAVA_LONG = re.compile(r"^-?\d+[lL]$")
_JS_FLOAT = re.compile(r"^-?\d+(\.\d+)?$")
_JS_BIGINT = re.compile(r"^-?\d+n$")


def _number_or_text(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def java_literal(text: str) -> Any:
    """A Java value whose type is not declared, read by its look."""
    if text in ("true", "false"):
        return text == "true"
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    if _JAVA_LONG.match(text):
        return int(text[:-1])
    if _JAVA_FLOAT.match(text):
        return float(re.sub(r"[fF]$", "", text))
    return _number_or_text(text)


def java_value(text: str, declared: str, item: str | None = None) -> Any:
    """A Java parameter's string read as BFCL reads it for its declared type (`item`: the items' type)."""
    if declared in ("byte", "short", "integer"):
        return int(text) if _INT.match(text) else text
    if declared == "float":
        return float(re.sub(r"[fF]$", "", text)) if _JAVA_FLOAT.match(text) else text
    if declared == "double":
        return float(text) if _JAVA_DOUBLE.match(text) else text
    if declared == "long":
        return int(re.sub(r"[lL]$", "", text)) if _JAVA_LONG.match(text) else text
    if declared == "boolean":
        return text == "true" if text in ("true", "false") else text
    if declared == "Array":
        return _java_array(text, item)
    if declared == "ArrayList":
        return _java_list(text, item)
    if declared == "HashMap":
        return _java_map(text)
    return text


def _java_item(text: str, item: str | None) -> Any:
    if item in ("char", "String"):
        return text[1:-1]
    return java_value(text, item) if item else java_literal(text)


def _java_array(text: str, item: str | None) -> Any:
    found = re.search(r"new\s+\w+\[\]\s*\{(.*?)\}", text)
    if not found:
        return text
    parts = [p.strip() for p in found.group(1).split(",") if p.strip()]
    return [java_value(p, item) if item else java_literal(p) for p in parts]


def _java_list(text: str, item: str | None) -> Any:
    as_list = re.search(r"new\s+ArrayList<\w*>\(Arrays\.asList\((.+?)\)\)", text)
    if as_list:
        return [_java_item(p.strip(), item) for p in as_list.group(1).split(",")]
    adds = re.search(r"new\s+ArrayList<\w*>\(\)\s*\{\{\s*(.+?)\s*\}\}", text, re.DOTALL)
    if adds:
        return [_java_item(a.strip(), item) for a in re.findall(r"add\((.+?)\)", adds.group(1))]
    return [] if re.search(r"new\s+ArrayList<\w*>\(\)", text) else text


def _java_map(text: str) -> Any:
    body = re.search(r"new\s+HashMap<.*?>\s*\(\)\s*\{\s*\{?\s*(.*?)\s*\}?\s*\}", text, re.DOTALL)
    if body:
        return {k: java_literal(v.strip()) for k, v in re.findall(r"put\(\"(.*?)\",\s*(.*?)\)", body.group(1))}
    return {} if re.search(r"new\s+HashMap<.*?>\s*\(\)", text) else text


def js_literal(text: str) -> Any:
    """A JavaScript value whose type is not declared, read by its look."""
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    if any(text.startswith(q) and text.endswith(q) for q in "\"'"):
        return text[1:-1]
    return _number_or_text(text)


def js_value(text: str, declared: str, item: str | None = None) -> Any:
    """A JavaScript parameter's string read as BFCL reads it for its declared type (`item`: the items' type)."""
    if declared == "String":
        quoted = any(text.startswith(q) and text.endswith(q) for q in "\"'")
        return text[1:-1] if quoted else text
    if declared == "integer":
        return int(text) if _INT.match(text) else text
    if declared == "float":
        return float(text) if _JS_FLOAT.match(text) else text
    if declared == "Bigint":
        return int(text[:-1]) if _JS_BIGINT.fullmatch(text) else text
    if declared == "Boolean":
        return text == "true" if text in ("true", "false") else text
    if declared == "array":
        return _js_array(text.strip(), item)
    if declared == "dict":
        return _js_dict(text.strip())
    return text


_JS_2D = re.compile(r"\[\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\]|\bnew\s+Array\(\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\)")
_JS_1D = re.compile(r"\[(.*?)\]|\bnew\s+Array\((.*?)\)")


def _js_array(text: str, item: str | None) -> Any:
    nested = _JS_2D.match(text)
    if nested:
        rows = []
        for i, row in enumerate(re.findall(r"\[(.*?)\]", nested.group(0))):
            row = row.strip()
            if i == 0 and row.startswith("["):
                row = row[1:]
            rows.append([js_literal(e.strip()) for e in row.split(",")])
        return rows
    flat = _JS_1D.match(text)
    if not flat:
        return text
    inner = flat.group(1) if flat.group(1) is not None else flat.group(2)
    parts = inner.strip().split(",") if inner and inner.strip() else []
    if not item:
        return [js_literal(p.strip()) for p in parts]
    if item not in JS_TYPES:
        return text  # BFCL's reader gives up on an item type it does not know and keeps the text
    return [js_value(p.strip(), item) for p in parts]


def _js_dict(text: str) -> Any:
    if text == "{}":
        return {}
    found = re.match(r"\{(.*?)\}", text)
    if not found:
        return text
    out: dict[str, Any] = {}
    for key, value in re.findall(r"([^:]+):\s*(.*?)(?:,\s*(?=[^,]+:)|$)", found.group(1)):
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            out[key.strip().strip("'\"")] = _js_array(value, None)
        elif value.startswith("{") and value.endswith("}"):
            out[key.strip().strip("'\"")] = _js_dict(value)
        else:
            out[key.strip().strip("'\"")] = js_literal(value.strip("'\""))
    return out
