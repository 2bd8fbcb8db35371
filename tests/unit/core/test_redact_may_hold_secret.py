"""`redact.document.may_hold_secret`: the look at a record's bytes that lets `registry list` skip reading a record
for its secrets. It may say True of a record without one (a name merely ending in `-key`), never False of a record
`redact_record_bytes` finds a secret in; the wrong answers are the near-misses every record has (`tokens`,
`tokenized`) taken for secrets, and the spellings of a name the bytes hide (a `\\u` escape, a letter whose lower case
is ASCII, UTF-16) taken for none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servepack.redact import redact_record_bytes
from servepack.redact.document import may_hold_secret

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"

SECRET_DOCS = [
    {"api_key": "abc"}, {"API_KEY": "abc"}, {"apiKey": "abc"}, {"hf-token": "x1"}, {"HF_TOKEN_FILE": "/k"},
    {"ssl_key_file": "/k"}, {"password": "pw"}, {"db_passwd": "pw"}, {"pass": "pw"}, {"auth": "pw"},
    {"credentials": ["a"]}, {"bearer": "b"}, {"cookie": "c"}, {"secrets": ["s"]}, {"hft": "t"},
    {"env": [{"name": "OPENAI_API_KEY", "value": "v"}]}, {"arguments": ["--api-key", "abc"]},
    {"arguments": ["--api-key=abc"]}, {"command": "llama-server --api-key abc --port 1"},
    {"command": "LLAMA_API_KEY=abc llama-server"}, {"config": ["admin_key: abc"]}, {"config": ["x:", "  token: |",
                                                                                              "    abc"]},
    {"notes": "\nkey: abc"}, {"notes": 'api-key = "abc"'}, {"deep": {"list": [{"x": {"Secret": "s"}}]}},
    {"already": {"api_key": "<redacted>"}}, {"max_tokens": 1, "tokenizer": "x", "hf_token": "x"},
    {"keys_seen": 2, "notes": "author: a", "auth": "x"},
]


@pytest.mark.parametrize("doc", SECRET_DOCS, ids=lambda d: json.dumps(d)[:40])
def test_every_record_redaction_finds_a_secret_in_may_hold_one(doc: object) -> None:
    for raw in (json.dumps(doc).encode(), json.dumps(doc, indent=2).encode()):
        assert redact_record_bytes(raw)[1], raw  # the corpus is of real secrets
        assert may_hold_secret(raw)


@pytest.mark.parametrize("raw", [
    b'{"api_\\u006bey": "abc"}',  # a JSON escape spells the name
    '{"api_\u212aey": "abc"}'.encode(),  # KELVIN SIGN: its lower case is k
    json.dumps({"api_key": "abc"}).encode("utf-16"),
    json.dumps({"api_key": "abc", "name": "W\u00e9n"}, ensure_ascii=False).encode(),
])
def test_bytes_that_hide_a_name_are_looked_at(raw: bytes) -> None:
    assert redact_record_bytes(raw)[1]
    assert may_hold_secret(raw)


@pytest.mark.parametrize("doc", [
    {"max_context_tokens": 8192, "output_tokens": 128}, {"tokenized": {"arguments": []}}, {"author": "x"},
    {"keyboard": "x"}, {"passthrough": 1}, {"authored_by": "x"}, {"key2": "v"}, {"cookies_seen": 0},
    {"notes": "the tokens are counted by the tokenizer"},
])
def test_near_misses_need_no_look(doc: object) -> None:
    raw = json.dumps(doc).encode()
    assert not redact_record_bytes(raw)[1]
    assert not may_hold_secret(raw)


def test_the_fixture_tree_is_judged_as_redaction_judges_it() -> None:
    clean = 0
    for path in sorted(TREE.rglob("*.json")):
        raw = path.read_bytes()
        found = redact_record_bytes(raw)[1]
        assert may_hold_secret(raw) or not found, path
        clean += not may_hold_secret(raw)
    assert clean >= 5  # most records hold no secret and are said so: the look saves the read
