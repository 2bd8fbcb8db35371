"""CLI behaviour that needs no model: one-line errors, exit codes, pack listing, the Spark claim refusal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SERVEPACK = [sys.executable, "-m", "servepack.cli.main"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVEPACK, *args], capture_output=True, text=True, timeout=120, check=False,
                          env=dict(os.environ))


def test_spark_claim_on_this_machine_is_refused_with_what_was_detected(tmp_path: Path) -> None:
    done = _cli("run", "laguna-s-2.1-dgx-spark", "--claim", "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("servepack: error: claim refused: hardware: detected ")
    assert "not dgx-spark-gb10-128gb" in line and "GPU name /^NVIDIA GB10$/ not matched" in line
    assert not (tmp_path / "o").exists()


def test_spark_pack_without_weights_names_the_missing_file(tmp_path: Path) -> None:
    done = _cli("run", "laguna-s-2.1-dgx-spark", "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    assert "model file laguna-s-2.1-Q4_K_M.gguf (poolside/Laguna-S-2.1-GGUF@fc4e48128952) is not at " in line
    assert "servepack pull PACK" in line


def test_bad_pack_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('schema_version = "servepack.pack/v1"\nid = "x"\n')
    done = _cli("pack", "validate", str(bad))
    assert done.returncode == 2
    assert done.stderr.strip() == f"servepack: error: {bad}: field description: Field required (and 8 more)"
    ok = _cli("pack", "validate", str(Path("src/servepack/packs/data/laguna-s-2.1-dgx-spark.toml").resolve()))
    assert ok.returncode == 0 and ok.stdout.startswith("ok laguna-s-2.1-dgx-spark sha256 ")


def test_packs_lists_both() -> None:
    done = _cli("packs")
    ids = [line.split("\t")[0] for line in done.stdout.splitlines()]
    assert ids == ["laguna-s-2.1-dgx-spark", "qwen2.5-coder-0.5b-cpu"]


def test_smoke_refuses_a_shape_twin(tmp_path: Path) -> None:
    from core_fixtures import make_pack, write_fake_server_bin

    from servepack.weights.twin import make_twin

    pack = make_pack(tmp_path)
    twin = tmp_path / "twin.gguf"
    make_twin(tmp_path / "tiny.gguf", twin, seed=1)
    fake = write_fake_server_bin(tmp_path)
    done = _cli("smoke", "run", str(pack), "--suite", "agent_smoke", "--model-path", str(twin),
                "--server-bin", str(fake), "--out", str(tmp_path / "o"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "servepack: error: random-weight twin: speed only, never smoke"
    receipt = (tmp_path / "o" / "receipt.json").read_text()
    assert '"random_weights": true' in receipt
