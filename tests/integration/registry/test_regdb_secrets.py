"""Issue 25 item 7 (left open): a record's secrets never reach anything a registry command prints; issue 33 item 1:
the database keeps the file's bytes as they are (hashed as they are), secrets included, and every read redacts.
Each form a launch can carry a key in is tried (argv `--api-key V` and `--api-key=V`, docker's `-e LLAMA_API_KEY=V`,
an observed command string, an env object, a JSON field), with a long key and with keys of three characters
(removed by their name, never by their value), and what every command prints is searched for each."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.redact import REDACTED, redact_document, redact_record_bytes

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"
LONG = "sk-regdb-7f6e5d4c3b2a1908"
# Three characters each, one per form: too short to be scrubbed by value, so only the names can remove them.
SHORT = {"argv": "Vb1", "argv=": "Vb2", "docker-env": "Vb3", "command": "Vb4", "command-env": "Vb5",
         "field": "Vb6", "env-object": "Vb7", "name-value": "Vb8"}
SECRETS = [LONG, *SHORT.values()]
MODEL = "acme-wren-7b-gguf--q4-k-m"
PLACES = sorted(["launch.arguments[15] (--api-key)", "launch.arguments[17] (--api-key)",
                 "launch.arguments[18] (--hf-token)", "launch.arguments[20] (LLAMA_API_KEY)",
                 "metadata.servepack.tokenized.arguments[16] (--api-key)",
                 "metadata.servepack.observed_command (--api-key)",
                 "metadata.servepack.observed_command (LLAMA_API_KEY)",
                 "metadata.servepack.api_key (api_key)", "metadata.servepack.env.HF_TOKEN (HF_TOKEN)",
                 "metadata.servepack.container_env[0].value (OPENAI_API_KEY)"])


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _keyed_recipe(folder: Path) -> Path:
    """The fixture's native recipe, its launch and metadata carrying a key in every form."""
    doc = json.loads((TREE / "recipe" / "wren-7b-native.json").read_text())
    doc["launch"]["arguments"] += ["--api-key", LONG, "--api-key", SHORT["argv"], f"--hf-token={SHORT['argv=']}",
                                   "-e", f"LLAMA_API_KEY={SHORT['docker-env']}"]
    meta = doc["metadata"]["servepack"]
    meta["tokenized"]["arguments"] += ["--api-key", SHORT["argv"]]
    meta["observed_command"] = (f"LLAMA_API_KEY={SHORT['command-env']} llama-server --model wren-7b-Q4_K_M.gguf "
                                f"--api-key {SHORT['command']} --port 8080")
    meta["api_key"] = SHORT["field"]
    meta["env"] = {"HF_TOKEN": SHORT["env-object"], "HOME": "/home/serve"}
    meta["container_env"] = [{"name": "OPENAI_API_KEY", "value": SHORT["name-value"]}]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "wren-7b-native.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def _leaks(data: bytes | str) -> list[str]:
    raw = data.encode() if isinstance(data, str) else data
    return [s for s in SECRETS if s.encode() in raw]


def test_the_fixtures_hold_none_of_the_test_secrets() -> None:
    """Guard: a short value found later came from the keyed record, not from the fixture tree."""
    for path in TREE.rglob("*.json"):
        assert _leaks(path.read_bytes()) == [], path


@pytest.fixture
def keyed_db(tmp_path: Path) -> Path:
    db = tmp_path / "db" / "registry.sqlite3"
    record = _keyed_recipe(tmp_path / "in" / "recipe")
    assert sorted(_leaks(record.read_bytes())) == sorted(SECRETS)  # the record really carries them all
    code, out, err = _run("registry", "import", str(record), "--db", str(db))
    assert code == 0, out + err
    assert _leaks(out + err) == []
    assert "kept as the file has them and shown as <redacted>" in out and "launch.arguments[" in out
    return db


def test_the_database_keeps_the_files_bytes_and_their_hash_secrets_included(keyed_db: Path, tmp_path: Path) -> None:
    """The wrong answer (before issue 33): the bytes held were the redacted record, hashed as redacted."""
    raw = (tmp_path / "in" / "recipe" / "wren-7b-native.json").read_bytes()
    with sqlite3.connect(keyed_db) as c:
        held, sha = c.execute("SELECT bytes, sha256 FROM sources").fetchone()
    assert held == raw and sha == hashlib.sha256(raw).hexdigest()
    assert redact_record_bytes(raw)[0] != raw  # the redacted form differs, so keeping it would fail the line above
    code, out, err = _run("registry", "show", "wren-7b-native", "--db", str(keyed_db), "--json")
    assert code == 0 and _leaks(out + err) == []
    assert [s["sha256"] for s in json.loads(out)["registry"]["sources"]] == [hashlib.sha256(raw).hexdigest()]


def test_show_list_choose_and_reproduce_print_no_secret_and_say_where_one_was(keyed_db: Path) -> None:
    code, out, err = _run("registry", "show", "wren-7b-native", "--db", str(keyed_db), "--json")
    assert code == 0, out + err
    assert _leaks(out + err) == []
    assert sorted(json.loads(out)["registry"]["redacted"]) == PLACES
    code, out, err = _run("registry", "show", "wren-7b-native", "--db", str(keyed_db))
    assert code == 0 and _leaks(out + err) == []
    for args in (("list", "--json"), ("list",), ("choose", MODEL, "--json"), ("choose", MODEL)):
        code, out, err = _run("registry", *args, "--db", str(keyed_db))
        assert code == 0, out + err
        assert "wren-7b-native" in out and _leaks(out + err) == [], args
    code, out, err = _run("reproduce", "wren-7b-native", "--db", str(keyed_db), "--dry-run")
    assert code == 0, out + err
    assert _leaks(out + err) == []
    assert "the record's launch needed an API key" in out + err


def test_a_database_written_with_a_secret_before_prints_none(keyed_db: Path, tmp_path: Path) -> None:
    """A database whose bytes were put there by another program: every read redacts, whatever it holds."""
    raw = _keyed_recipe(tmp_path / "verbatim" / "recipe").read_bytes()
    with sqlite3.connect(keyed_db) as c:
        c.execute("UPDATE sources SET bytes = ?", (raw,))
    assert _leaks(keyed_db.read_bytes())  # the hostile state is really there
    code, out, err = _run("registry", "show", "wren-7b-native", "--db", str(keyed_db), "--json")
    assert code == 0, out + err
    assert _leaks(out + err) == []
    assert sorted(json.loads(out)["registry"]["redacted"]) == PLACES
    for args in (("registry", "list", "--json"), ("registry", "choose", MODEL, "--json"),
                 ("reproduce", "wren-7b-native", "--dry-run")):
        code, out, err = _run(*args, "--db", str(keyed_db))
        assert code == 0, out + err
        assert _leaks(out + err) == [], args


def test_show_of_a_record_file_prints_no_secret(tmp_path: Path) -> None:
    record = _keyed_recipe(tmp_path / "recipe")
    for args in (("--json",), ()):
        code, out, err = _run("registry", "show", str(record), *args)
        assert code == 0, out + err
        assert _leaks(out + err) == []


def test_a_record_without_secrets_is_stored_byte_for_byte(tmp_path: Path) -> None:
    src = TREE / "recipe" / "wren-7b-native.json"
    db = tmp_path / "registry.sqlite3"
    code, out, err = _run("registry", "import", str(src), "--db", str(db))
    assert code == 0, out + err
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT bytes FROM sources").fetchone() == (src.read_bytes(),)


@pytest.mark.parametrize(("given", "kept"), [
    (["--api-key", "abc", "--port", "1"], ["--api-key", REDACTED, "--port", "1"]),
    (["--api-key=abc"], [f"--api-key={REDACTED}"]),
    (["-e", "LLAMA_API_KEY=abc"], ["-e", f"LLAMA_API_KEY={REDACTED}"]),
    (["--api-key", "--port", "1"], ["--api-key", "--port", "1"]),  # a flag with no value: nothing to hide
    ("serve --api-key 'a b' --ctx-size 8", f"serve --api-key '{REDACTED}' --ctx-size 8"),
    ("LLAMA_API_KEY=abc llama-server", f"LLAMA_API_KEY={REDACTED} llama-server"),
    ({"api_key": "abc", "max_tokens": "8"}, {"api_key": REDACTED, "max_tokens": "8"}),
    ({"image-max-tokens": "8", "tokens": "8"}, {"image-max-tokens": "8", "tokens": "8"}),  # counts, not secrets
])
def test_redact_document_by_name_whatever_the_length(given: object, kept: object) -> None:
    assert redact_document(given)[0] == kept


# (d) A record the registry's rules refuse: the message names the field and the rule, never the record's secret.
REFUSED = {"status": "Vd1", "kind": "Vd2", "arguments": "Vd3", "env": "Vd4"}


def _refused_recipe(folder: Path, what: str) -> Path:
    doc = json.loads((TREE / "recipe" / "wren-7b-native.json").read_text())
    secret = REFUSED[what]
    if what == "status":
        doc["status"] = f"--api-key={secret}"  # "'--api-key=…' is not one of ['candidate', 'validated']"
    elif what == "kind":
        doc["launch"]["kind"] = {"api_key": secret}  # "{'api_key': '…'} is not one of [...]"
    elif what == "arguments":
        doc["launch"]["arguments"] = f"llama-server --api-key {secret}"  # "'llama-server …' is not of type 'array'"
    else:
        doc["status"] = f"HF_TOKEN={secret}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "wren-7b-native.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    return path


def _clear(text: str) -> list[str]:
    return [s for s in REFUSED.values() if s in text]


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_a_refused_records_secret_is_in_no_message_nor_the_database(tmp_path: Path, what: str) -> None:
    record = _refused_recipe(tmp_path / "export" / "recipe", what)
    assert REFUSED[what] in record.read_text()  # the hostile value is really there
    db = tmp_path / "db" / "registry.sqlite3"
    code, out, err = _run("registry", "import", str(record), "--db", str(db), "--json")
    refusal = json.loads(out)["files"][0]
    assert refusal["outcome"] == "refused" and "breaks the registry's rule" in refusal["reason"]
    assert _clear(out + err) == []
    code, out, err = _run("registry", "import", str(record), "--db", str(db))
    assert "refused" in out + err and _clear(out + err) == []
    for path in db.parent.iterdir():
        assert REFUSED[what].encode() not in path.read_bytes(), path.name
    code, out, err = _run("registry", "check", str(tmp_path / "export"))
    assert code != 0 and "wren-7b-native.json" in out + err and _clear(out + err) == []
    code, out, err = _run("registry", "check", str(tmp_path / "export"), "--json")
    assert _clear(out + err) == []
    code, out, err = _run("reproduce", str(record), "--dry-run")
    assert code == 2 and "breaks the registry's rule" in err and _clear(out + err) == []


def test_a_refusal_still_says_which_rule_and_where() -> None:
    from servepack.registry.format.check import check_files, upstream_problems

    doc = json.loads((TREE / "recipe" / "wren-7b-native.json").read_text())
    doc["status"] = "--api-key=Vd1"
    assert upstream_problems("recipe", doc) == [f"status: '--api-key={REDACTED}' is not one of ['candidate', "
                                                "'validated'] (upstream schema recipe.schema.json)"]
    doc["status"], doc["launch"]["arguments"] = "candidate", "llama-server --api-key Vd3"
    data = (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    problems = [p for p in check_files({"recipe/wren-7b-native.json": data}) if p.field == "launch.arguments"]
    assert [p.message for p in problems] == [f"'llama-server --api-key {REDACTED}' is not of type 'array'"]
