"""Issue 25 item 7: a secret in a tune never lands in a file. A space refuses a secret-bearing flag with one line;
a base preset's --api-key is redacted in tune.json, trials.jsonl and every trial's files (every file walked)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from tune_fixtures import write_space

from servepack.cli.main import cli

KEY = "sk-tune-9a8b7c6d5e4f3a2b"


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_a_space_with_an_api_key_is_refused_with_one_line(tune_pack: Path, surface_bin: Path, tmp_path: Path) -> None:
    space = write_space(tmp_path, f'[tune]\nthreads = [4, 8]\napi-key = ["{KEY}", "other-key-value"]\n')
    out = tmp_path / "tune"
    r = CliRunner().invoke(cli, ["tune", str(tune_pack), "--space", str(space), "--server-bin", str(surface_bin),
                                 "--out", str(out)])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "flag 'api-key' carries a secret" in lines[0] and KEY not in lines[0]
    assert not out.exists() or _files(out) == []  # nothing written, no server started


def test_a_base_presets_api_key_is_in_no_file_of_the_tune(tune_pack: Path, surface_bin: Path,
                                                          tmp_path: Path) -> None:
    pack = tmp_path / "keyed.toml"
    pack.write_text(tune_pack.read_text().replace('alias = "tiny"\n', f'alias = "tiny"\napi-key = "{KEY}"\n', 1))
    space = write_space(tmp_path, '[tune]\nthreads = [4, 8]\nflash-attn = "on"\n')
    out = tmp_path / "tune"
    r = CliRunner().invoke(cli, ["tune", str(pack), "--space", str(space), "--server-bin", str(surface_bin),
                                 "--out", str(out), "--budget-trials", "2", "--confirm-samples", "2"])
    assert r.exit_code == 0, r.stderr
    written = _files(out)
    names = {p.name for p in written}
    assert {"tune.json", "trials.jsonl", "receipt.json", "server.log"} <= names, names
    for path in written:
        assert KEY.encode() not in path.read_bytes(), f"{KEY} leaked into {path.relative_to(out)}"
    assert b"<redacted>" in (out / "tune.json").read_bytes()  # the fact a key was set is kept
