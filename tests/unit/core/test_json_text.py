"""`cli.render.json_text` (what `print_json` prints): the text of `json.dumps(obj, indent=2, default=str)`, written
faster for a document of plain values (`registry list --json` on 10,000 records). The wrong answers: compact JSON,
non-ASCII or a control character written as itself, NaN/Infinity written as null or a string, a tuple or an empty
container indented, a key's order changed, a value that is not plain (a Path, a str or int subclass, a key that is
not a str) written otherwise than `json.dumps` writes it, a circular document written at all.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any

import pytest

from servepack.cli.render import json_text, print_json


class Colour(enum.Enum):
    RED = "red"


class Word(str, enum.Enum):
    TOKEN = "token"


class Count(enum.IntEnum):
    TWO = 2


PLAIN: list[Any] = [
    {}, [], (), "", 0, -1, 10**30, 1.5, -0.0, 1e16, 1e-7, float("nan"), float("inf"), float("-inf"), True, False, None,
    "ünïcode é ✓ 𝄞", "ctl \x00 \x1b[2J \r\n\t \u202e \ud800", 'quote " back \\ slash',
    {"z": 1, "a": [1, [], {}, [[]], {"b": {}}], "m": {"n": None, "t": (1, "x", 2.25)}},
    [{"id": "r", "sources": [{"source": "/p", "envelope": False}], "normalised": [], "redacted": ["a (b)"]}] * 3,
    {"deep": [[[[{"x": [1, 2, {"y": "z"}]}]]]], "": "empty key", "é": "non-ascii key"},
]
NOT_PLAIN: list[Any] = [
    {"path": Path("/tmp/x")}, [Colour.RED], {"w": Word.TOKEN}, [Count.TWO], {1: "int key"}, {None: 1, 2.5: 2, True: 3},
    {"set": {1}}, [b"bytes"],
]


@pytest.mark.parametrize("obj", PLAIN + NOT_PLAIN, ids=repr)
def test_the_text_is_json_dumps_indent_2(obj: Any) -> None:
    assert json_text(obj) == json.dumps(obj, indent=2, default=str)


def test_the_text_is_not_any_other_json() -> None:
    doc = {"b": [1, (2, 3)], "a": {"x": float("nan"), "y": float("inf")}, "é": "ü\x1b", "e": [], "f": {}}
    text = json_text(doc)
    assert json.loads(text).keys() == doc.keys()
    for wrong in (json.dumps(doc), json.dumps(doc, indent=2, ensure_ascii=False), json.dumps(doc, indent=4),
                  json.dumps(doc, indent=2, sort_keys=True), json.dumps(doc, indent="\t")):
        assert text != wrong
    assert '"\\u00e9": "\\u00fc\\u001b"' in text and "NaN" in text and "Infinity" in text
    assert '"e": [],\n  "f": {}\n}' in text and '[\n    1,\n    [\n      2,\n      3\n    ]\n  ]' in text


def test_a_circular_document_is_refused_as_json_dumps_refuses_it() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        json_text({"loop": loop})


def test_print_json_prints_the_text_and_a_newline(capsys: pytest.CaptureFixture[str]) -> None:
    doc = {"records": [{"id": "a", "n": 1}], "db": Path("/tmp/db")}
    print_json(doc)
    assert capsys.readouterr().out == json.dumps(doc, indent=2, default=str) + "\n"
