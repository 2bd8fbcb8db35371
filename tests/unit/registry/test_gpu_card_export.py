"""A GPU export names one of the registry's cards only where GPU model and memory both match it, else carries the
hardware record the registry needs; "submit this" only when the export passed the registry's rules (issue 33, open
item 3).

The wrong answers: the catalog's name rules alone decided the card, so an 80 GiB GPU that NVML calls an H200 was
exported as `rtx-h200-141gb`, and a pack's target card was taken whatever the GPU's memory; and a GPU export said
nothing of which card it named or whether it could be submitted."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parents[1] / "records"))  # records_synth
from records_synth import gpu_host, make_run

from servepack.cli.main import cli
from servepack.registry.export import catalog_gpu_id, export_run, registry_hardware
from servepack.registry.export.hardware import card_memory_problem
from servepack.registry.format.check import check_folder

QWEN_PARAMS = 494_032_768


@pytest.mark.parametrize(("name", "mib", "expect"), [
    ("NVIDIA H200", 143771, "rtx-h200-141gb"),
    ("NVIDIA H200", 81559, None),  # the wrong answer: rtx-h200-141gb by its name alone
    ("NVIDIA H100 80GB HBM3", 81559, "rtx-h100-sxm-80gb"),
    ("NVIDIA H100 80GB HBM3", 40960, None),
    ("NVIDIA A100-SXM4-40GB", 40960, "rtx-a100-sxm4-40gb"),
    ("NVIDIA A100-SXM4-40GB", 81920, None),
    ("NVIDIA GB10", None, "dgx-spark-gb10-128gb"),  # unified memory: NVML reports none of its own
])
def test_a_catalog_card_needs_the_gpus_model_and_memory(name: str, mib: int | None, expect: str | None) -> None:
    found = catalog_gpu_id(name, mib << 20 if mib else None)
    assert (found[0] if found else None) == expect


def test_memory_against_a_cards_size() -> None:
    assert card_memory_problem("rtx-4090-24gb", 24564 << 20) is None
    assert card_memory_problem("rtx-4090-24gb", 49140 << 20) == "card rtx-4090-24gb has 24 GB and this GPU 48 GiB"
    assert card_memory_problem("dgx-spark-gb10-128gb", None) is None
    assert card_memory_problem("cpu-generic", 1 << 40) is None  # a card that states no size


def _view(target: str, gpu_name: str, mib: int) -> SimpleNamespace:
    host = gpu_host(gpu_name, mib)
    hw = SimpleNamespace(target_match=True, target_id=target, label=host.label(), detected_id="nvidia-x-48gb")
    return SimpleNamespace(receipt=SimpleNamespace(hardware=hw, host=host))


def test_a_packs_target_card_of_another_size_is_not_taken() -> None:
    ok = registry_hardware(_view("rtx-4090-24gb", "NVIDIA GeForce RTX 4090", 24564))  # type: ignore[arg-type]
    assert (ok.id, ok.in_catalog) == ("rtx-4090-24gb", True)
    # the wrong answer: rtx-4090-24gb because the pack's rules matched the name, on a 48 GiB card
    got = registry_hardware(_view("rtx-4090-24gb", "NVIDIA GeForce RTX 4090", 49140))  # type: ignore[arg-type]
    assert got.id != "rtx-4090-24gb" and got.in_catalog is False
    assert got.how.startswith("the pack's target is not this GPU (card rtx-4090-24gb has 24 GB and this GPU 48 GiB); "
                              "nothing in the registry's catalog matches")


def test_an_h200_name_on_80_gib_carries_its_own_hardware_record(tmp_path: Path) -> None:
    run = make_run(tmp_path / "p", "r", host=gpu_host("NVIDIA H200", 81559), gguf_parameters=QWEN_PARAMS)
    res = export_run(run, tmp_path / "out")
    recipe = json.loads(res.recipe.read_text())
    assert recipe["hardware_id"] != "rtx-h200-141gb" and res.hardware_published is False
    assert (res.out_dir / "hardware" / f"{recipe['hardware_id']}.json").is_file()
    assert check_folder(res.out_dir) == [] and res.submittable


def _export(tmp_path: Path, name: str, mib: int, *extra: str) -> tuple[int, str]:
    run = make_run(tmp_path / "p", "r", host=gpu_host(name, mib), gguf_parameters=QWEN_PARAMS)
    result = CliRunner().invoke(cli, ["registry", "export", str(run), "--out", str(tmp_path / "out"), *extra])
    return result.exit_code, result.stdout


def test_the_export_names_its_card_and_says_submit_only_when_it_passes(tmp_path: Path) -> None:
    code, out = _export(tmp_path / "a", "NVIDIA GeForce RTX 4090", 24564)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[-2] == ("card        rtx-4090-24gb (one of the registry's cards: GPU 'NVIDIA GeForce RTX 4090' with "
                         "24 GiB is the catalog's rtx-4090-24gb)")
    assert lines[-1] == "submit this: every record passes the registry's rules, the references between them included"
    code, out = _export(tmp_path / "b", "NVIDIA RTX 9999", 49140, "--json")
    assert code == 0, out
    got = json.loads(out)
    assert got["hardware"]["id"] == "nvidia-rtx-9999-48gb" and got["hardware"]["published_card"] is False
    assert got["submittable"] is True and got["written"]["hardware/nvidia-rtx-9999-48gb.json"]
