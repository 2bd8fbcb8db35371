"""The registry database keeps, per source's bytes, whether they may hold a secret (`secret_words`, by the rule
`redact.document.MAY_HOLD_SECRET_RULE`), so `registry list --json` on 10,000 records does not look through every
record's bytes again (issue 31.7). A cache: written by write commands only, read only where its rule is today's, and
a file without it lists the same. The wrong answers: a stale or missing answer trusted (a key's places gone from
--json), every record's bytes looked at although answered, a read command writing, the digest differing between
processes or not following the words.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import servepack.registry.queries as queries
from servepack.cli.main import cli
from servepack.redact import document
from servepack.redact.document import MAY_HOLD_SECRET_RULE
from servepack.registry.db import RegistryDB

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"
KEY = "sk-secretwords-0a9b8c7d6e"
KEYED_PLACE = "launch.arguments[15] (--api-key)"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout + result.stderr


@pytest.fixture()
def db(tmp_path: Path) -> Path:
    tree = tmp_path / "registry"
    shutil.copytree(TREE, tree)
    keyed = json.loads((TREE / "recipe" / "wren-7b-native.json").read_text())
    keyed["id"] = "wren-7b-keyed"
    keyed["launch"]["arguments"] += ["--api-key", KEY]
    (tree / "recipe" / "wren-7b-keyed.json").write_text(json.dumps(keyed, indent=2))
    path = tmp_path / "r.sqlite3"
    code, out = _run("registry", "import", str(tree), "--db", str(path))
    assert code == 0, out
    return path


def _answers(path: Path) -> dict[str, tuple[str, int]]:
    with sqlite3.connect(path) as c:
        return {sha: (rule, may) for sha, rule, may in c.execute("SELECT sha256, rule, may_hold FROM secret_words")}


def _sha_of(path: Path, record_id: str) -> str:
    with sqlite3.connect(path) as c:
        (sha,) = c.execute("SELECT s.sha256 FROM sources s JOIN records r ON r.pk = s.record_pk WHERE r.id = ?",
                           (record_id,)).fetchone()
    return str(sha)


def _edit(path: Path, sql: str, args: tuple[Any, ...] = ()) -> None:
    c = sqlite3.connect(path)
    with c:
        c.execute(sql, args)
    c.close()


def _listed(path: Path) -> dict[str, Any]:
    code, out = _run("registry", "list", "--db", str(path), "--json")
    assert code == 0, out
    return dict(json.loads(out))


def _keyed(listed: dict[str, Any]) -> list[str]:
    return list(next(r for r in listed["recipes"] if r["id"] == "wren-7b-keyed")["redacted"])


def test_an_import_answers_every_source_by_todays_rule(db: Path) -> None:
    answers = _answers(db)
    with sqlite3.connect(db) as c:
        held = {sha for (sha,) in c.execute("SELECT sha256 FROM sources")}
    assert set(answers) == held and {rule for rule, _ in answers.values()} == {MAY_HOLD_SECRET_RULE}
    assert answers[_sha_of(db, "wren-7b-keyed")][1] == 1  # the wrong answer: 0, its key never looked for
    assert answers[_sha_of(db, "wren-7b-native")][1] == 0


def test_list_json_is_the_same_with_the_answers_without_them_and_with_stale_ones(db: Path) -> None:
    fresh = _listed(db)
    assert KEYED_PLACE in _keyed(fresh) and KEY not in json.dumps(fresh)
    _edit(db, "UPDATE secret_words SET rule = 'an-older-rule', may_hold = 0")  # a stale "no" for every source
    assert _listed(db) == fresh  # the wrong answer: the key's place gone
    _edit(db, "DROP TABLE secret_words")  # a file an older servepack wrote
    assert _listed(db) == fresh


def test_a_no_by_todays_rule_is_taken_without_looking_at_the_bytes(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    looked: list[bytes] = []
    real = queries.may_hold_secret

    def spy(raw: bytes) -> bool:
        looked.append(raw)
        return real(raw)

    monkeypatch.setattr(queries, "may_hold_secret", spy)
    _listed(db)
    assert len(looked) == 1 and KEY.encode() in looked[0]  # only the bytes answered yes
    looked.clear()
    _edit(db, "UPDATE secret_words SET may_hold = 0 WHERE sha256 = ?", (_sha_of(db, "wren-7b-keyed"),))
    assert _keyed(_listed(db)) == [] and looked == []  # the answer is what is read (so it must be right)
    _edit(db, "DROP TABLE secret_words")
    _listed(db)
    assert len(looked) > 5  # without the answers, every plain record's bytes are looked at, as before


def test_a_read_command_writes_no_answers(db: Path) -> None:
    _edit(db, "DROP TABLE secret_words")
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    _listed(db)
    code, out = _run("registry", "list", "--db", str(db))
    assert code == 0, out
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_a_write_command_answers_what_is_missing_or_stale(db: Path, tmp_path: Path) -> None:
    one = tmp_path / "registry" / "recipe" / "wren-7b-native.json"
    _edit(db, "DROP TABLE secret_words")
    code, out = _run("registry", "import", str(one), "--db", str(db))
    assert code == 0 and "already present" in out, out
    answers = _answers(db)
    assert len(answers) > 10 and answers[_sha_of(db, "wren-7b-keyed")] == (MAY_HOLD_SECRET_RULE, 1)
    _edit(db, "UPDATE secret_words SET rule = 'an-older-rule', may_hold = 0")
    code, out = _run("registry", "import", str(one), "--db", str(db))
    assert code == 0, out
    assert _answers(db) == answers


def test_a_database_that_takes_no_write_keeps_no_answers_and_lists_the_same(db: Path) -> None:
    fresh = _listed(db)
    _edit(db, "DROP TABLE secret_words")
    with RegistryDB.open(db, create=True) as opened:
        opened.conn.execute("PRAGMA query_only = ON")
        assert opened.note_secret_words() == 0  # the wrong answer: an error for a cache
    assert _listed(db) == fresh


def test_the_rule_digest_is_the_same_in_every_process_and_follows_the_words(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = "from servepack.redact.document import MAY_HOLD_SECRET_RULE as r; print(r)"
    printed = {subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                              timeout=60).stdout.strip() for _ in range(2)}
    assert printed == {MAY_HOLD_SECRET_RULE}
    monkeypatch.setattr(document, "_SECRET_WORDS", document._SECRET_WORDS[:-1])  # a word fewer
    assert document._may_hold_secret_rule() != MAY_HOLD_SECRET_RULE
