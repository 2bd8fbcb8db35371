"""Every TOML file a user names (a pack, a tune space) is read by one function, `packs.loader.parse_toml`: TOML
nested past the reader's recursion (`threads = [[[[…]]]]`, inline tables in inline tables) is one line, exit 2 —
`tune --space` raised RecursionError, exit 70, before — and so is TOML that is not UTF-8 or not TOML. Nothing is
launched or written; every file in scratch directories."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.errors import PackError, UsageError
from servepack.packs.loader import parse_toml

DEEP = {"array": "[tune]\nthreads = " + "[" * 5000 + "]" * 5000 + "\n",
        "inline": "[tune]\nthreads = " + "{a=" * 2000 + "1" + "}" * 2000 + "\n"}


@pytest.mark.parametrize("kind", list(DEEP))
@pytest.mark.parametrize("command", ["tune", "pack validate"])
def test_toml_nested_too_deeply_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str,
                                            command: str) -> None:
    monkeypatch.setenv("SERVEPACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SERVEPACK_RESULTS_DIR", str(tmp_path / "results"))
    hostile = tmp_path / "hostile.toml"
    hostile.write_text(DEEP[kind])
    argv = (["tune", "qwen2.5-coder-0.5b-cpu", "--space", str(hostile), "--out", str(tmp_path / "never")]
            if command == "tune" else ["pack", "validate", str(hostile)])
    result = CliRunner().invoke(cli, argv)
    label = f"--space {hostile}" if command == "tune" else str(hostile)
    what = "a space" if command == "tune" else "a pack"
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"servepack: error: {label}: TOML nested too deeply to read; {what} nests a few tables, fix the file"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostile.toml"]


def test_parse_toml_names_the_file_and_why() -> None:
    assert parse_toml(b'[tune]\nthreads = [1, 2]\n', "x", "a space") == {"tune": {"threads": [1, 2]}}
    with pytest.raises(UsageError, match=r"^--space f: not UTF-8 text \(byte 1\); a space is a UTF-8 TOML file$"):
        parse_toml(b"a\xff", "--space f", "a space")
    with pytest.raises(PackError, match=r"^p\.toml: not valid TOML: "):
        parse_toml(b"[x", "p.toml", "a pack", error=PackError)
    with pytest.raises(UsageError, match="nested too deeply"):
        parse_toml(DEEP["array"].encode(), "s", "a space")
