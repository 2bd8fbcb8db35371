"""A JSON document's secrets (a registry record, stored form or envelope; `servepack.redact`'s rule: "By name"
and "Messages quoting a record"): fields, env objects, argv lists, the lines of a template profile's config and
flags inside strings redacted and listed by where they were (`redact_document`, `redact_record_bytes`), the values
removed (`document_secrets`), and a message that quotes the record scrubbed of them (`scrub_message`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from types import CodeType
from typing import Any

from servepack.redact.names import holds_secret, is_reference, is_secret_name, is_switch, secret_positions
from servepack.redact.text import apply_spans, redact_text, text_spans
from servepack.store import REDACTED


def _lines_redacted(lines: list[str], where: str, found: list[str], values: list[str]) -> list[str]:
    """A list of strings redacted as the lines of one text (a template profile's config: a YAML block scalar's value
    is on the lines below its name), each line's secrets listed as `where[i] (name)`."""
    spans = text_spans("\n".join(lines))
    out, at = [], 0
    for i, line in enumerate(lines):
        end = at + len(line)
        mine = [(max(a, at) - at, min(b, end) - at, name) for a, b, name in spans if a < end and b > at]
        found.extend(f"{where}[{i}] ({name})" for _, _, name in mine)
        values.extend(line[a:b] for a, b, _ in mine)
        out.append(apply_spans(line, mine))
        at = end + 1
    return out


def _redact(node: Any, where: str, found: list[str], values: list[str]) -> Any:
    """`node` redacted; where each secret was goes to `found`, the value itself (as it was) to `values`. A JSON number
    in a record is a figure (`time_per_output_token_ms`), never a secret: a key there is a string."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        named = node.get("name") if isinstance(node.get("name"), str) and is_secret_name(node["name"]) else None
        for key, value in node.items():
            here = f"{where}.{key}" if where else str(key)
            if isinstance(value, str) and (holds_secret(str(key), value) or (
                    named and key == "value" and not is_switch(value) and not is_reference(value))):
                found.append(f"{here} ({named or key})")  # `"api_key": "abc"`, `{"name": "HF_TOKEN", "value": …}`
                values.append(value)
                out[key] = REDACTED
            elif (isinstance(value, list) and is_secret_name(str(key)) and value
                  and all(isinstance(v, str) for v in value)):
                found.append(f"{here} ({key})")
                values.extend(v for v in value if not is_switch(v))
                out[key] = [v if is_switch(v) else REDACTED for v in value]
            else:
                out[key] = _redact(value, here, found, values)
        return out
    if isinstance(node, list):
        if node and all(isinstance(v, str) for v in node):  # read as the lines of one text, then as an argv
            items = _lines_redacted(node, where, found, values)
        else:
            items = [_redact(v, f"{where}[{i}]", found, values) for i, v in enumerate(node)]
        if all(isinstance(v, str) for v in items):  # an argv: `["--api-key", "abc"]` (no program name needed)
            argv = ["argv", *items]
            for i, prefix in secret_positions(argv):
                flag = argv[i - 1] if prefix is None else prefix[:-1]
                found.append(f"{where}[{i - 1}] ({flag})")
                values.append(argv[i] if prefix is None else argv[i][len(prefix):])
                items[i - 1] = REDACTED if prefix is None else prefix + REDACTED
        return items
    if isinstance(node, str):
        spans = text_spans(node)
        found.extend(f"{where} ({name})" for _, _, name in spans)
        values.extend(node[a:b] for a, b, _ in spans)
        return apply_spans(node, spans)
    return node


def document_secrets(doc: Any) -> list[str]:
    """Every secret value `redact_document` removes from `doc`, as it stands there (any length), longest first."""
    values: list[str] = []
    _redact(doc, "", [], values)
    return sorted({v for v in values if v and v != REDACTED}, key=lambda v: (-len(v), v))


def scrub_message(text: str, secrets: Iterable[str]) -> str:
    """A message that may quote a record (a rule it breaks: `'--api-key=abc' is not one of [...]`) with each of the
    record's secret values (`document_secrets`, any length) removed where it stands as a word of its own, then every
    value a name marks (`redact_text`)."""
    for value in secrets:
        text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(value)}(?![A-Za-z0-9])", REDACTED, text)
    return redact_text(text)[0]


def redact_document(doc: Any) -> tuple[Any, list[str]]:
    """A JSON document (a registry record, stored form or envelope) with every secret value replaced by REDACTED,
    and where each one was (`launch.arguments[5] (--api-key)`), by the names that hold secrets (`is_secret_name`):
    a field named so (`api_key`, an env object's `LLAMA_API_KEY`, `{"name": "HF_TOKEN", "value": …}`), the value
    after such a flag in a list of strings (an argv, docker arguments), and such a flag or variable inside a string
    (an observed command `llama-server --api-key abc`, `LLAMA_API_KEY=abc`). A value already REDACTED is listed too,
    so a record redacted when it was stored still says where its secrets were."""
    found: list[str] = []
    clean = _redact(doc, "", found, [])
    return clean, list(dict.fromkeys(found))


# The words a secret's name ends with (`names.is_secret_name`: `--api-key`, `HF_TOKEN`, `hft`, ..., then perhaps
# `-file`/`-path`), lowered, each followed by no letter or digit: `tokens`, `tokenized` and `author` are not.
# Each word's stem is looked for first (a plain substring search), its pattern only where the stem stands.
_SECRET_WORDS = tuple((stem, re.compile(stem + tail + rb"(?![a-z0-9])")) for stem, tail in (
    (b"key", rb"s?"), (b"token", b""), (b"secret", rb"s?"), (b"pass", rb"(?:wd|word)?"), (b"auth", b""),
    (b"credential", rb"s?"), (b"bearer", b""), (b"cookie", b""), (b"hft", b"")))


def may_hold_secret(raw: bytes) -> bool:
    """Whether `redact_record_bytes(raw)` could find a secret in `raw`, decided without reading the JSON: False only
    when no word a secret's name ends with stands in it before anything but a letter or digit (`bypass"` is True,
    `passthrough` False). Every secret is found by its name (`names.is_secret_name`), and a name is followed by what
    ends it (a quote, `=`, `:`, a space, the end of a string), never by a letter or digit. Bytes that could spell a
    name otherwise are True: a `\\u` escape, anything not ASCII (a letter whose lower case is ASCII, UTF-16)."""
    if not raw.isascii():
        return True
    low = raw.lower()
    return b"\\u" in low or any(stem in low and word.search(low) for stem, word in _SECRET_WORDS)


def _code_text(code: CodeType) -> str:
    """A function's code as text that is the same in every process (a nested code object's repr holds its address)."""
    consts = [_code_text(c) if isinstance(c, CodeType) else repr(c) for c in code.co_consts]
    return repr((code.co_code, consts, code.co_names))


def _may_hold_secret_rule() -> str:
    words = [(stem, word.pattern) for stem, word in _SECRET_WORDS]
    return hashlib.sha256(repr((words, _code_text(may_hold_secret.__code__))).encode()).hexdigest()[:16]


# What `may_hold_secret` decides by (its words and its own code), as a digest: an answer kept beside the bytes it was
# given (the registry database's `secret_words`) is taken only while this is the same.
MAY_HOLD_SECRET_RULE = _may_hold_secret_rule()


def redact_record_bytes(raw: bytes) -> tuple[bytes, tuple[str, ...]]:
    """`raw` (a JSON record) with its secrets redacted (`redact_document`) and where they were. The bytes are kept as
    they are when nothing changed; otherwise the document is written again (indented, keys in their order)."""
    if not may_hold_secret(raw):
        return raw, ()
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return raw, ()
    clean, found = redact_document(doc)
    if clean == doc:
        return raw, tuple(found)
    return (json.dumps(clean, indent=2, ensure_ascii=False) + "\n").encode(), tuple(found)
