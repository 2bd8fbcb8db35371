"""Text from records, file names and the command line reaches the terminal as text, in one place (`cli.render`).

A record's fields, a results directory's name or a value on the command line can hold escape sequences (clear the
screen, retitle the window), a carriage return (rewrite the line shown), C1 controls, bidi overrides, line breaks
(a line that passes for servepack's own) and rich markup (`[/bold]` failed a command with exit 70). Each is shown
as its escape; every error stays one line. The commands run as the user runs them, with click told the output is a
terminal (`color=True`), so nothing is stripped on the way to the assertions. All files are in scratch directories.
"""

from __future__ import annotations

import json
import re
import shutil
import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.cli.render import terminal_text

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"
CLI_SRC = Path(__file__).parents[3] / "src" / "servepack" / "cli"
HOSTILE = "\x1b]0;PWNED\x07\x1b[2J\r\x9b31m\u202eevil\u200b\nbest runnable here: forged"
SHOWN = r"\x1b]0;PWNED\x07\x1b[2J\r\x9b31m\u202eevil\u200b\nbest runnable here: forged"


def steering(text: str) -> list[str]:
    """What must never reach the terminal raw: controls but tab and newline (C0, DEL, C1), format characters
    (bidi overrides, zero-width), line and paragraph separators, lone surrogates."""
    return [c for c in text if c not in "\t\n" and unicodedata.category(c) in {"Cc", "Cf", "Zl", "Zp", "Cs"}]


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), color=True)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The fixture registry tree with one recipe's free text made hostile (the registry's rules allow it), imported."""
    root = tmp_path_factory.mktemp("hostile")
    tree = root / "tree"
    shutil.copytree(TREE, tree)
    path = tree / "recipe" / "wren-7b-native.json"
    rec = json.loads(path.read_text())
    rec["engine"]["version"] += HOSTILE
    rec["description"] += HOSTILE
    rec["launch"]["arguments"][1] += HOSTILE
    rec["metadata"]["servepack"]["tokenized"]["arguments"][2] += HOSTILE
    rec["facts"]["engine.graph_mode"]["reason"] += HOSTILE
    path.write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")  # \uXXXX escapes: a lone surrogate too
    db = root / "registry.sqlite3"
    code, out, err = _invoke("registry", "import", str(tree), "--db", str(db))
    assert code == 0, out + err
    return db, path


@pytest.mark.parametrize("argv", [
    ["registry", "show", "{file}"],
    ["registry", "show", "wren-7b-native", "--db", "{db}"],
    ["registry", "list", "--db", "{db}"],
    ["registry", "choose", "wren-7b", "--db", "{db}"],
    ["reproduce", "{file}", "--dry-run"],
    ["reproduce", "wren-7b-native", "--dry-run", "--db", "{db}"],
], ids=["show-file", "show-id", "list", "choose", "reproduce-file", "reproduce-id"])
def test_a_records_text_is_shown_never_obeyed(hostile_db: tuple[Path, Path], argv: list[str]) -> None:
    db, path = hostile_db
    code, out, err = _invoke(*(a.format(db=db, file=path) for a in argv))
    assert code == 0, out + err
    assert not steering(out + err), steering(out + err)
    assert not any(line.startswith("best runnable here: forged") for line in (out + err).splitlines())
    if argv[1] in ("show", "reproduce"):  # the fields these print are shown whole, escapes as written
        assert SHOWN in out, out


def test_the_same_outputs_on_main_obeyed_the_record(hostile_db: tuple[Path, Path]) -> None:
    """The wrong answer this guards against: the raw text, as click passes it to a terminal unchanged."""
    _, path = hostile_db
    raw = CliRunner().invoke(cli, ["registry", "show", str(path), "--json"], color=True).stdout
    assert "\\u001b]0;PWNED" in raw and "\x1b" not in raw  # JSON output escapes every control character itself
    assert len(steering(HOSTILE)) == 7 and not steering(terminal_text(HOSTILE))


def test_a_name_with_rich_markup_is_shown_not_parsed(tmp_path: Path) -> None:
    """`[/bold]` in a directory name made the progress line raise MarkupError: exit 70 before."""
    run = tmp_path / "x[/bold][red]"  # the folder `bold][red]` in the folder `x[`
    run.mkdir(parents=True)
    code, _, err = _invoke("verify", str(run))
    assert code == 1 and "internal error" not in err, err  # an empty folder does not verify; nothing else
    assert f"verifying{run}" in "".join(err.split()), err  # the progress line may be wrapped


@pytest.mark.parametrize("ref", ["x\nservepack: ok", "x\rservepack: ok", "x\x1b[2K\x1b[1Aok"])
def test_an_error_naming_a_hostile_value_is_one_line(tmp_path: Path, ref: str) -> None:
    code, out, err = _invoke("registry", "show", ref, "--db", str(tmp_path / "none.sqlite3"))
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("servepack: error: x\\"), err
    assert not steering(err)
    assert not list(tmp_path.iterdir())  # nothing created (no database for a read)


def test_a_hostile_option_value_in_a_usage_error_is_one_line() -> None:
    code, _, err = _invoke("worker", "--port", "1\x1b[2J\n2")
    assert code == 2 and err.splitlines() == [
        "servepack: error: Invalid value for '--port': '1\\x1b[2J\\n2' is not a valid integer range. "
        "(see `cli worker --help`)"]  # CliRunner names the group `cli`


def test_terminal_text_escapes_steering_characters_and_keeps_the_rest() -> None:
    for code in [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), 0x061C, 0x200B, 0x200E, 0x200F,
                 *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0xFEFF, 0xD800, 0x2028, 0x2029, 0xE0001]:
        shown = terminal_text(f"a{chr(code)}b")
        assert not steering(shown) and shown.startswith("a\\") and shown.endswith("b"), (hex(code), shown)
    assert terminal_text("\U000e0001") == "\\U000e0001"
    assert terminal_text("\x1b[31m") == "\\x1b[31m" and terminal_text("\u202e") == "\\u202e"
    assert terminal_text("tab\there\nline") == "tab\there\nline"  # tab and line breaks kept in a block
    assert terminal_text("a\nb\u2028c", one_line=True) == "a\\nb\\u2028c"
    kept = "naïve 中文 × · — → ≤ 🙂 [bold] \\x1b"
    assert terminal_text(kept, one_line=True) == kept


def test_every_cli_line_goes_through_render() -> None:
    """No module of the cli writes to the terminal but through cli/render.py (which escapes what it is given)."""
    direct = re.compile(r"click\.echo\(|click\.secho\(|\bprint\(|sys\.std(out|err)\b|console\.print\(|Console\(")
    found = [f"{p.name}:{n}" for p in sorted(CLI_SRC.glob("*.py")) if p.name != "render.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if direct.search(line)]
    assert found == []
