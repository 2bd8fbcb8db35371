"""Issue 33 item 6: `reproduce --dry-run` shows every record's launch as recorded (image, entrypoint, env, mounts,
script steps, a lab profile's config and args), what would run here, and why not; a protocol cell above the
launch's slots is left out with a line saying so.

The wrong answers (before): a vLLM docker record and a lab recipe of an engine servepack does not launch were
refused with exit 2 and nothing shown; a script's non-server steps were dropped unsaid; the sweep's @c4 cell was
benched against the launch's `--parallel 1` without a word."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def tree_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("tree") / "registry"
    shutil.copytree(TREE, tree)
    doc = json.loads((tree / "recipe" / "wren-7b-docker.json").read_text())
    doc["id"] = "wren-7b-vllm"
    doc["engine"]["name"] = "vllm"
    doc["launch"].update({"image": "vllm/vllm-openai@sha256:" + "a" * 64, "entrypoint": None,
                          "arguments": ["--model", "acme/Wren-7B", "--max-model-len", "8192",
                                        "--long-prefill-token-threshold", "1024", "--api-key", "sk-shown-never-1"],
                          "env": {"HF_TOKEN": "${HF_TOKEN:-}", "VLLM_API_KEY": "sk-shown-never-2"},
                          "volumes": ["/srv/hf:/root/.cache/huggingface"]})
    doc["speed_sweep_ids"] = []
    (tree / "recipe" / "wren-7b-vllm.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    db = tree.parent / "r.sqlite3"
    code, out, err = _run("registry", "import", str(tree), "--db", str(db))
    assert code == 0 and " 0 refused" in out, out + err
    return db


def test_a_vllm_docker_record_is_shown_with_why_it_will_not_run(tree_db: Path) -> None:
    code, out, err = _run("reproduce", "wren-7b-vllm", "--db", str(tree_db), "--dry-run")
    assert code == 0, err
    lines = out.splitlines()
    assert "  image: vllm/vllm-openai@sha256:" + "a" * 64 in lines
    assert ("  arguments: --model acme/Wren-7B --max-model-len 8192 --long-prefill-token-threshold 1024 --api-key "
            "'<redacted>'") in lines
    assert "  env: HF_TOKEN=${HF_TOKEN:-}, VLLM_API_KEY=<redacted>" in lines
    assert "  volumes: /srv/hf:/root/.cache/huggingface" in lines
    assert any(x.startswith("would not run here: ") and "the record's engine 'vllm' has no launch translation" in x
               for x in lines)
    assert "sk-shown-never" not in out + err
    code, out, err = _run("reproduce", "wren-7b-vllm", "--db", str(tree_db), "--dry-run", "--json")
    got = json.loads(out)
    assert code == 0 and got["runs_here"] is False and "no launch translation" in got["why_not"]
    assert {"part": "volumes", "value": "/srv/hf:/root/.cache/huggingface"} in got["launch"]["as_recorded"]


def test_a_runnable_docker_record_shows_its_image_beside_the_launch_here(tree_db: Path) -> None:
    code, out, err = _run("reproduce", "wren-7b-docker", "--db", str(tree_db), "--dry-run")
    assert code == 0, err
    recorded = out[out.index("launch as recorded:"):out.index("launch here (")]
    assert "  image: ghcr.io/example/llama.cpp:server@sha256:" in recorded
    assert "  entrypoint: /app/llama-server\n" in recorded and "  container port: 8080\n" in recorded


def test_every_script_step_is_shown_not_only_the_server(tree_db: Path) -> None:
    code, out, err = _run("reproduce", "wren-7b-script", "--db", str(tree_db), "--dry-run", "--json")
    assert code == 0, err
    parts = json.loads(out)["launch"]["as_recorded"]
    assert {"part": "step 1", "value": "huggingface-cli download acme/Wren-7B-GGUF"} in parts
    assert any(p["part"] == "step 2" and p["value"].startswith("./build/bin/llama-server") for p in parts)


def test_a_cell_above_the_launchs_slots_is_left_out_with_a_line(tree_db: Path) -> None:
    code, out, err = _run("reproduce", "wren-7b-native", "--db", str(tree_db), "--dry-run", "--json")
    assert code == 0, err
    protocol = json.loads(out)["protocol"]
    assert protocol["concurrency"] == [1]  # the sweep's @c4 row is above --parallel 1
    assert ("cell 8,192 ctx × 128 gen @c4 left out: concurrency 4 is above the launch's 1 slot(s) (--parallel 1 in "
            "the record's launch); there it would queue, not measure the record's figure") in protocol["notes"]
