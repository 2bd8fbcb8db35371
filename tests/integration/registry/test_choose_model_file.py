"""`registry choose --model-file F` judges a recipe's model pin and memory from F, so F must be a GGUF: a FIFO or a
device is refused as what it is (it was called "no such file"), and a file that is no GGUF is refused with the
reason (it was marked `ok model` and sized from its byte count). One line, exit 2; files in scratch directories."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "core"))

from gguf_writer import write_gguf

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("choose") / "r.sqlite3"
    result = CliRunner().invoke(cli, ["registry", "import", str(TREE), "--db", str(path)])
    assert result.exit_code == 0, result.output
    return path


def _fifo(d: Path) -> tuple[Path, str]:
    os.mkfifo(d / "m.gguf")
    return d / "m.gguf", "not a regular file (a FIFO (named pipe)); give a GGUF model file"


def _garbage(d: Path) -> tuple[Path, str]:
    (d / "m.gguf").write_bytes(b"PK\x03\x04" + bytes(4096))
    return d / "m.gguf", "not a GGUF file (bad magic)"


def _sparse(d: Path) -> tuple[Path, str]:
    with (d / "m.gguf").open("wb") as fh:
        fh.truncate(1 << 30)  # a GiB of holes: refused from its first bytes, nothing hashed
    return d / "m.gguf", "not a GGUF file (bad magic)"


def _device(d: Path) -> tuple[Path, str]:
    return Path("/dev/zero"), "not a regular file (a character device); give a GGUF model file"


@pytest.mark.parametrize("make", [_fifo, _garbage, _sparse, _device], ids=["fifo", "not-gguf", "sparse", "device"])
def test_a_model_file_that_is_no_gguf_is_refused(db: Path, tmp_path: Path, make: object) -> None:
    path, why = make(tmp_path)  # type: ignore[operator]
    result = CliRunner().invoke(cli, ["registry", "choose", "wren-7b", "--db", str(db), "--model-file", str(path)])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.splitlines() == [f"servepack: error: --model-file {path}: {why}"]


def test_a_gguf_is_judged(db: Path, tmp_path: Path) -> None:
    model = tmp_path / "wren-7b-Q4_K_M.gguf"
    write_gguf(model, {"general.architecture": "llama", "llama.context_length": 512}, [("w", (64,), 0)])
    result = CliRunner().invoke(cli, ["registry", "choose", "wren-7b", "--db", str(db), "--model-file", str(model)])
    assert result.exit_code == 0, result.output
    assert f"model: {model}" in result.stdout
