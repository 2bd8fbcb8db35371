"""Issue 35 item 3 (`--db` through a linked folder), decided in `registry.dbfile`: a linked folder on the way is the
user's own layout and is followed (the database is made where it leads); a link on the way that someone else could
have made or re-pointed (owned by another user, or in a folder every user may write without the sticky bit) is
refused, naming the link and where it leads, and nothing is made there. Scratch directories only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli

FIXTURE = Path(__file__).parents[2] / "fixtures" / "registry" / "laguna_dgx_spark_record.json"
RECORD_ID = "laguna-s-2-1-q4-k-m-dgx-spark-gb10-128gb-llama-cpp-tp1"


def _run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, list(args))
    return r.exit_code, r.stdout, r.stderr


def _import(db: Path) -> tuple[int, str, str]:
    return _run("registry", "import", str(FIXTURE), "--db", str(db))


def test_a_linked_folder_of_your_own_is_followed_and_the_database_made_where_it_leads(tmp_path: Path) -> None:
    real = tmp_path / "big-disk" / "servepack"
    real.mkdir(parents=True)
    (tmp_path / "home").mkdir()
    link = tmp_path / "home" / "data"
    link.symlink_to(real)
    code, out, err = _import(link / "registry.sqlite3")
    assert code == 0 and f"imported recipe {RECORD_ID}" in out, err
    assert (real / "registry.sqlite3").is_file() and link.is_symlink()  # made where the link leads
    code, out, err = _run("registry", "list", "--db", str(link / "registry.sqlite3"))
    assert code == 0 and RECORD_ID in out, err
    relative = tmp_path / "home" / "rel"
    relative.symlink_to("../big-disk/servepack")  # a relative link, resolved from its own folder
    code, out, _ = _run("registry", "list", "--db", str(relative / "registry.sqlite3"))
    assert code == 0 and RECORD_ID in out


def test_a_link_in_a_folder_every_user_may_write_is_refused_and_nothing_made(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    shared = tmp_path / "shared"
    shared.mkdir()
    link = shared / "reg"
    link.symlink_to(target)
    shared.chmod(0o777)
    try:
        code, _, err = _import(link / "registry.sqlite3")
    finally:
        shared.chmod(0o755)
    assert code == 2 and err.splitlines() == [
        f"servepack: error: {link}: a link to {target} in {shared}, a folder every user may write (not sticky), so "
        "another user could re-point it; give --db the real path"], err
    assert list(target.iterdir()) == []
    shared.chmod(0o1777)  # sticky, like /tmp: only the link's owner may replace it
    try:
        code, _out, err = _import(link / "registry.sqlite3")
    finally:
        shared.chmod(0o755)
    assert code == 0 and (target / "registry.sqlite3").is_file(), err


def test_a_link_deeper_in_the_chain_is_judged_too(tmp_path: Path) -> None:
    """The wrong answer this guards: checking only the first link (or only the last name) of the path."""
    target = tmp_path / "target"
    target.mkdir()
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "inner").symlink_to(target)
    outer = tmp_path / "outer"
    outer.symlink_to(shared)
    shared.chmod(0o777)
    try:
        code, _, err = _import(outer / "inner" / "registry.sqlite3")
    finally:
        shared.chmod(0o755)
    assert code == 2 and f"{shared / 'inner'}: a link to {target} in {shared}" in err, err
    assert list(target.iterdir()) == []


def test_a_link_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("giving a link to another user needs root (the check itself runs as any user)")
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "theirs"
    link.symlink_to(target)
    os.lchown(link, 4242, 4242)
    code, _, err = _import(link / "registry.sqlite3")
    assert code == 2 and f"{link}: a link to {target} owned by another user (uid 4242)" in err, err
    assert list(target.iterdir()) == []
