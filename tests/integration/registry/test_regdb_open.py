"""Opening the registry database: never through a link (at the file or the journal names SQLite opens beside it),
never in a folder others could swap it in, and only `registry import` creates it. Scratch directories only.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.registry.db import RegistryDB

FIXTURE = Path(__file__).parents[2] / "fixtures" / "registry" / "laguna_dgx_spark_record.json"
RECORD_ID = "laguna-s-2-1-q4-k-m-dgx-spark-gb10-128gb-llama-cpp-tp1"
VICTIM_BYTES = b"a file the user keeps; the registry must never write here\n"
READS = [["registry", "list"], ["registry", "show", RECORD_ID], ["registry", "choose", "laguna-s-2.1"]]


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tree(root: Path) -> dict[str, str]:
    """Every entry under root (links as links) with its bytes' sha256, so any write or new file shows."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else ("dir" if p.is_dir() else _digest(p))
    return out


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    """A real registry holding the fixture recipe, made by `registry import`."""
    db = tmp_path / "real" / "registry.sqlite3"
    code, out, err = _run("registry", "import", str(FIXTURE), "--db", str(db))
    assert code == 0, out + err
    return db


@pytest.mark.parametrize("command", [["registry", "import", str(FIXTURE)], *READS], ids=lambda c: c[1])
def test_a_link_at_the_db_path_is_refused_and_its_target_is_untouched(tmp_path: Path, command: list[str]) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM_BYTES)
    link = tmp_path / "scratch" / "registry.sqlite3"
    link.parent.mkdir()
    link.symlink_to(victim)
    before = _tree(tmp_path)
    code, _, err = _run(*command, "--db", str(link))
    assert code == 2 and err.splitlines() == [
        f"servepack: error: {link}: a symbolic link; the registry database and its journal are never opened through "
        "a link: remove the link, or give --db the real file's path"], err
    assert victim.read_bytes() == VICTIM_BYTES and _tree(tmp_path) == before


@pytest.mark.parametrize("command", [["registry", "import", str(FIXTURE)], *READS], ids=lambda c: c[1])
def test_a_link_to_a_real_registry_is_refused_too(registry: Path, tmp_path: Path, command: list[str]) -> None:
    link = tmp_path / "link.sqlite3"
    link.symlink_to(registry)
    before = _tree(tmp_path)
    code, _, err = _run(*command, "--db", str(link))
    assert code == 2 and "a symbolic link" in err and len(err.splitlines()) == 1, err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("suffix", ["-journal", "-wal", "-shm"])
def test_a_link_at_a_journal_name_is_refused_before_sqlite_writes_through_it(registry: Path, tmp_path: Path,
                                                                             suffix: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM_BYTES)
    journal = registry.with_name(registry.name + suffix)
    journal.symlink_to(victim)
    second = tmp_path / "other.json"
    second.write_bytes(FIXTURE.read_bytes().replace(b'"notes"', b'"notes" ', 1))  # other bytes: a write if let in
    before = _tree(tmp_path)
    for command in (["registry", "import", str(second)], *READS):
        code, _, err = _run(*command, "--db", str(registry))
        assert code == 2 and err.splitlines() == [
            f"servepack: error: {journal}: a symbolic link; the registry database and its journal are never opened "
            "through a link: remove the link, or give --db the real file's path"], (command, err)
    assert victim.read_bytes() == VICTIM_BYTES and _tree(tmp_path) == before


@pytest.mark.parametrize("command", READS, ids=lambda c: c[1])
def test_a_read_command_on_an_empty_folder_creates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           command: list[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _run(*command, "--db", str(empty / "registry.sqlite3"))
    made = "no such file, and no registry database at" if command[1] == "show" else "no registry database here;"
    assert code == 2 and len(err.splitlines()) == 1 and made in err and "registry import PATH…" in err, err
    assert list(empty.iterdir()) == []
    cache = tmp_path / "cache-not-made"  # the default path: the cache folder itself is not made either
    monkeypatch.setenv("SERVEPACK_CACHE_DIR", str(cache))
    code, _, err = _run(*command)
    made = "no such file, and no registry database at" if command[1] == "show" else "no registry database here (no"
    assert code == 2 and made in err and len(err.splitlines()) == 1, err
    assert not cache.exists() and list(empty.iterdir()) == []


def test_a_read_command_never_makes_the_schema_in_an_empty_file_but_import_does(tmp_path: Path) -> None:
    db = tmp_path / "registry.sqlite3"
    db.touch()
    for command in READS:
        code, _, err = _run(*command, "--db", str(db))
        assert code == 2 and err.splitlines() == [
            f"servepack: error: {db}: an empty file, not a registry yet; `servepack registry import PATH…` makes "
            "one (or give --db the path of one)"], err
        assert db.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["registry.sqlite3"]
    code, out, err = _run("registry", "import", str(FIXTURE), "--db", str(db))
    assert code == 0 and f"imported recipe {RECORD_ID}" in out, err
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT id FROM records").fetchall() == [(RECORD_ID,)]


def test_read_commands_leave_an_existing_registry_byte_for_byte(registry: Path) -> None:
    before = _tree(registry.parent)
    for command in READS:
        code, out, err = _run(*command, "--db", str(registry))
        assert code == 0 and RECORD_ID in out, err
    assert _tree(registry.parent) == before


def test_a_folder_others_can_write_without_the_sticky_bit_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    code, _, err = _run("registry", "import", str(FIXTURE), "--db", str(shared / "registry.sqlite3"))
    assert code == 2 and err.splitlines() == [
        f"servepack: error: {shared}: writable by every user and not sticky, so another user could swap the registry "
        "file; give --db PATH in a folder of your own"], err
    assert list(shared.iterdir()) == []
    shared.chmod(0o1777)  # sticky, like /tmp: only the owner may replace the file, so it is accepted
    code, out, err = _run("registry", "import", str(FIXTURE), "--db", str(shared / "registry.sqlite3"))
    assert code == 0 and f"imported recipe {RECORD_ID}" in out, err


def test_special_files_at_the_db_path_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.sqlite3"
    os.mkfifo(fifo)
    code, _, err = _run("registry", "import", str(FIXTURE), "--db", str(fifo))
    assert code == 2 and err.splitlines() == [  # named as what it is, as verify names a receipt that is none
        f"servepack: error: {fifo}: not a regular file (a FIFO (named pipe)); give --db the path of a registry "
        "database file"], err
    for command in (["registry", "list"], ["registry", "show", "x"]):  # a read names it the same way
        code, _, err = _run(*command, "--db", str(fifo))
        assert code == 2 and f"{fifo}: not a regular file (a FIFO (named pipe))" in err, err
    code, _, err = _run("registry", "list", "--db", "/dev/null")
    assert code == 2 and "/dev/null: not a regular file (a character device)" in err, err
    with pytest.raises(Exception, match="no registry database here"):
        RegistryDB.open(tmp_path / "absent.sqlite3")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.sqlite3"]
