"""Issue 33 item 4: the host is matched to the registry's cards by instruction set and architecture (a CPU box) or
by GPU model and memory. The wrong answer (before): an AVX2 host was only `cpu-amd-epyc-2c-24gb` and `choose` said
NO hardware for the registry's `x86-64-avx2-cpu` recipe."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from servepack.registry.cards import card_match, cpu_card_for_export, cpu_flags, host_cards, isa_of
from servepack.registry.checks import check_hardware
from servepack.registry.export.hardware import catalog_gpu_id
from servepack.registry.format import parse_record
from servepack.registry.host_facts import HostFacts

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"
CPUINFO = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse sse2 avx avx2 fma bmi2\n\nprocessor\t: 1\n"


def test_the_instruction_set_from_cpuinfo() -> None:
    assert isa_of(cpu_flags(CPUINFO)) == "avx2"
    assert isa_of(cpu_flags(CPUINFO.replace("avx2", "avx2 avx512f avx512bw"))) == "avx512"
    assert isa_of(cpu_flags(CPUINFO.replace(" avx2", ""))) is None
    assert cpu_flags("Features\t: fp asimd sve\n") == {"fp", "asimd", "sve"}


@pytest.mark.parametrize(("card", "arch", "isa", "match"), [
    ("x86-64-avx2-cpu", "x86-64", "avx2", True),
    ("x86-64-avx2-cpu", "x86-64", "avx512", True),  # an AVX-512 host runs an AVX2 build
    ("x86-64-avx512-cpu", "x86-64", "avx2", False),  # not the other way round
    ("x86-64-avx2-cpu", "x86-64", None, False),
    ("x86-64-cpu", "x86-64", None, True),
    ("x86-64-avx2-cpu", "aarch64", None, False),
    ("aarch64-cpu", "aarch64", None, True),
    ("cpu-amd-epyc-2c-24gb", "x86-64", "avx2", False),
])
def test_a_cpu_card_by_architecture_and_instruction_set(card: str, arch: str, isa: str | None, match: bool) -> None:
    assert (card_match(card, arch, isa) is not None) is match


def test_the_cards_a_host_is_most_specific_first() -> None:
    gpu = catalog_gpu_id("NVIDIA GeForce RTX 3090", 24 << 30)
    assert gpu is not None and gpu[0] == "rtx-3090-24gb"
    assert host_cards("x86-64", "avx512", [gpu]) == ("rtx-3090-24gb", "x86-64-avx512-cpu", "x86-64-avx2-cpu",
                                                       "x86-64-cpu")
    assert card_match("rtx-3090-24gb", "x86-64", "avx2", [gpu]) == gpu[1]
    assert card_match("rtx-4090-24gb", "x86-64", "avx2", [gpu]) is None


def test_an_export_names_a_published_card_or_says_why_not() -> None:
    assert cpu_card_for_export("x86-64", "avx512") == ("x86-64-avx2-cpu", None)
    card, why = cpu_card_for_export("aarch64", None)
    assert card == "aarch64-cpu" and why is not None and "publishes no such card" in why
    card, why = cpu_card_for_export("x86-64", None)
    assert card == "x86-64-cpu" and why is not None


def _host(arch: str, isa: str | None) -> HostFacts:
    return HostFacts("cpu-amd-epyc-2c-24gb", "AMD EPYC 7B13 (2 cores, 24 GiB) · no GPU", 24 << 30, 20 << 30, None,
                     Path("/nonexistent"), None, probe=lambda n: None,  # type: ignore[arg-type,return-value]
                     cpu_arch=arch, isa=isa)


def test_choose_calls_an_avx2_host_the_registrys_avx2_card(tmp_path: Path) -> None:
    doc = json.loads((TREE / "recipe" / "wren-7b-native.json").read_text())
    doc["hardware_id"] = "x86-64-avx2-cpu"
    raw = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    rec = parse_record(raw, tmp_path / "recipe" / "wren-7b-native.json")
    c = check_hardware(rec, _host("x86-64", "avx2"))
    assert c.ok is True and c.detail == ("recorded on x86-64-avx2-cpu; this host is a x86-64 CPU with AVX2, which "
                                         "runs an AVX2 build: the registry's card x86-64-avx2-cpu")
    c = check_hardware(rec, _host("x86-64", None))
    assert c.ok is False and c.detail.endswith("the registry cards it is: x86-64-cpu")


CARD_FILE = Path(__file__).parents[2] / "fixtures" / "registry" / "cards" / "nvidia" / "ferro-gpu-24gb.json"


def test_a_lab_card_is_a_record_and_names_a_gpu_by_model_and_memory(tmp_path: Path) -> None:
    """The lab's cards (cards/<vendor>/<id>.json) import as records of kind card (they were skipped as "not a
    record"); a held card names a GPU whose name holds one of its names and whose memory is the card's."""
    from click.testing import CliRunner

    from servepack.cli.main import cli
    from servepack.registry.cards import gpu_card_of
    from servepack.registry.format import load_record
    from servepack.registry.host_facts import with_held_cards

    card = load_record(CARD_FILE)
    assert card.kind == "card" and card.id == "ferro-gpu-24gb"
    result = CliRunner().invoke(cli, ["registry", "import", str(CARD_FILE.parent.parent), "--db",
                                      str(tmp_path / "r.sqlite3")])
    assert result.exit_code == 0 and "by kind: 1 cards;" in result.stdout, result.output
    doc = card.record
    assert gpu_card_of(doc, "Ferro GPU 24GB PCIe", 24 << 30) == (
        "ferro-gpu-24gb", "GPU 'Ferro GPU 24GB PCIe' with 24 GiB is the lab's card ferro-gpu-24gb (Ferro GPU 24GB, "
        "24 GB)")
    assert gpu_card_of(doc, "Ferro GPU 24GB", 48 << 30) is None  # another memory: another card
    assert gpu_card_of(doc, "Ferro GPU 240", 24 << 30) is None  # a name is matched word for word
    host = replace(_host("x86-64", "avx2"), gpus=(("Ferro GPU 24GB PCIe", 24 << 30),))
    rec = parse_record((TREE / "recipe" / "wren-7b-native.json").read_bytes(), TREE / "recipe" / "x.json")
    assert check_hardware(rec, host).ok is False  # recorded on ferro-gpu-24gb; no card held yet
    assert check_hardware(rec, with_held_cards(host, [doc])).ok is True
