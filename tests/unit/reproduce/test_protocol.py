"""What a record says it measured: facts, protocol and figures, from LocalMaxxing's notes, servepack's export or a
speed sweep; and the provenance a reproduction's records carry."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "records"))

from records_synth import make_run

from servepack.errors import UsageError
from servepack.pipeline.reproduce import resolve_record
from servepack.registry.db import RegistryDB
from servepack.registry.export import export_records, validate
from servepack.registry.format import load_record, parse_notes
from servepack.registry.ingest import import_one
from servepack.reproduce.protocol import protocol_of, record_facts
from servepack.reproduce.provenance import REPRODUCED_KIND, Original, amend

FIXTURE = Path(__file__).parents[2] / "fixtures" / "registry" / "laguna_dgx_spark_record.json"


def test_the_seed_record_states_its_facts() -> None:
    f = record_facts(load_record(FIXTURE))
    assert f.hardware_ids == ("dgx-spark-gb10-128gb",) and f.engine_name == "llama.cpp"
    assert f.engine_commit == "04b2b72" and f.engine_sha256 is None
    assert f.model_sha256 == "7da520c5f44bc3c79d4eeebfd1151ba7114c5d7568e72a995638417093c5753f"
    assert f.model_sha256_where == "metadata.localmaxxing.notes"
    assert f.arguments_where == "metadata.localmaxxing.tokenized.arguments" and f.arguments[0] == "llama-server"


def test_the_seed_protocol_is_localmaxxings_fresh_prompt_rule() -> None:
    p = protocol_of(load_record(FIXTURE))
    assert p is not None
    assert (p.context_marks, p.gen_tokens, p.samples, p.concurrency, p.warmup, p.cache_prompt) == \
        ((8192,), 1024, 7, (1,), 0, False)
    figures = p.cells[0].figures
    assert figures["decode_tok_s"].median == 19.3 and len(figures["decode_tok_s"].samples) == 7
    assert figures["ttft_ms"].samples[0] == 10897.33 and figures["prefill_tok_s"].median == 785.3
    assert p.bench_overrides(None) == {"context_marks": (8192,), "gen_tokens": 1024, "samples": 7,
                                       "concurrency": (1,), "warmup": 0, "cache_prompt": False}
    assert p.bench_overrides(3)["samples"] == 3


def test_a_servepack_export_gives_its_cells_samples_and_pins(tmp_path: Path) -> None:
    run = make_run(tmp_path / "pack", "r", smoke=None, decode=(36.0, 36.4, 35.7, 36.1, 36.2),
                   prefill=(160.0, 158.0, 162.0, 161.0, 159.0))
    recipe, _ = export_records(run, tmp_path / "out")
    loaded = load_record(recipe)
    f = record_facts(loaded)
    assert f.engine_sha256 == "e" * 64 and f.pack_id == "qwen2.5-coder-0.5b-cpu"
    assert f.model_sha256_where == "metadata.servepack.model_sha256" and f.model_sha256 is not None
    assert "cpu-test-cpu-9000-2c-24gb" in f.hardware_ids
    p = protocol_of(loaded)
    assert p is not None
    assert (p.context_marks, p.gen_tokens, p.samples, p.warmup) == ((256, 1024), 128, 5, 1)
    decode = p.cells[1].figures["decode_tok_s"]
    assert decode.samples == tuple(round(d * 0.98, 2) for d in (36.0, 36.4, 35.7, 36.1, 36.2))


def test_a_record_without_cells_in_its_notes_reads_its_speed_sweep(tmp_path: Path) -> None:
    run = make_run(tmp_path / "pack", "r", smoke=None)
    recipe_path, sweep_path = export_records(run, tmp_path / "out")
    doc = json.loads(recipe_path.read_text())
    doc["metadata"]["servepack"]["notes"] = "No sentences here."
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc))
    assert protocol_of(load_record(bare)) is None
    p = protocol_of(load_record(bare), load_record(sweep_path))
    assert p is not None and p.context_marks == (256, 1024) and p.samples == 3
    fig = p.cells[0].figures["decode_tok_s"]
    assert fig.samples == () and "a median only" in fig.source


def test_a_speed_sweep_or_a_record_without_a_launch_is_refused(tmp_path: Path) -> None:
    run = make_run(tmp_path / "pack", "r", smoke=None)
    recipe_path, sweep_path = export_records(run, tmp_path / "out")
    with pytest.raises(UsageError, match="a speed sweep record; give its recipe"):
        record_facts(load_record(sweep_path))
    doc = json.loads(recipe_path.read_text())
    del doc["metadata"]["servepack"]["tokenized"]
    native = tmp_path / "native.json"
    native.write_text(json.dumps(doc))
    facts = record_facts(load_record(native))  # the launch contract itself still holds the argv
    assert facts.arguments_where == "launch.binary + launch.arguments"
    assert facts.arguments == (doc["launch"]["binary"], *doc["launch"]["arguments"])
    del doc["launch"]["arguments"], doc["facts"]["launch.arguments"]
    no_launch = tmp_path / "no-launch.json"
    no_launch.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=r"cannot reproduce here because the record states no command to run: "
                                         r"launch kind native carries no arguments"):
        record_facts(load_record(no_launch))


def test_the_reproductions_records_name_the_original_and_stay_in_the_schema(tmp_path: Path) -> None:
    run = make_run(tmp_path / "pack", "r", smoke=None)
    recipe_path, sweep_path = export_records(run, tmp_path / "out")
    recipe, sweep = json.loads(recipe_path.read_text()), json.loads(sweep_path.read_text())
    original = Original(id="laguna-x", sha256="f" * 64, source=str(FIXTURE), origin_url="https://example.org/runs/1")
    verdicts = [{"cell": "256 ctx × 128 gen @c1", "metric": "decode_tok_s", "verdict": "REPRODUCED", "reason": "r"}]
    new_recipe, new_sweep = amend(recipe, sweep, original, at="2026-07-28T10:00:00.000Z",
                                  report={"verdicts": verdicts})
    validate("recipe", new_recipe, "amended recipe")
    validate("speed_sweep", new_sweep, "amended sweep")
    repro = new_recipe["metadata"]["servepack"]["reproduces"]
    assert (repro["record_id"], repro["record_sha256"], repro["record_source"]) == ("laguna-x", "f" * 64, str(FIXTURE))
    kinds = {s["kind"]: s["url"] for s in new_recipe["provenance"]["sources"]}
    assert kinds[REPRODUCED_KIND] == FIXTURE.resolve().as_uri()
    assert kinds[f"{REPRODUCED_KIND}-origin"] == "https://example.org/runs/1"
    assert REPRODUCED_KIND in {s["kind"] for s in new_sweep["provenance"]["sources"]}
    assert "decode_tok_s at 256 ctx × 128 gen @c1 REPRODUCED" in new_recipe["metadata"]["servepack"]["notes"]
    assert recipe["metadata"]["servepack"].get("reproduces") is None  # the export itself is left as it was
    # the notes' own sample sentences still parse, and say the same, after the added sentence
    before = parse_notes(recipe["metadata"]["servepack"]["notes"])
    assert before and parse_notes(new_recipe["metadata"]["servepack"]["notes"]) == before


def test_a_record_argument_is_a_file_or_an_id_the_local_registry_holds(tmp_path: Path) -> None:
    loaded, original = resolve_record(str(FIXTURE), tmp_path / "none.sqlite3")
    assert loaded.path == FIXTURE and original.held is None and original.source == str(FIXTURE)
    assert original.sha256 == hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    with pytest.raises(UsageError, match="no such file, and no registry database at"):
        resolve_record("laguna-s-2-1-q4-k-m-dgx-spark-gb10-128gb-llama-cpp-tp1", tmp_path / "none.sqlite3")
    db = tmp_path / "registry.sqlite3"
    with RegistryDB.open(db, create=True) as opened:
        assert import_one(opened, FIXTURE, True).outcome == "imported"
    loaded, original = resolve_record("laguna-s-2-1-q4-k-m-dgx-spark-gb10-128gb-llama-cpp-tp1", db)
    assert original.held == "registry id laguna-s-2-1-q4-k-m-dgx-spark-gb10-128gb-llama-cpp-tp1 version 1 of 1"
    assert original.sha256 == hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    assert original.source == str(FIXTURE.absolute()) and record_facts(loaded).engine_commit == "04b2b72"
    with pytest.raises(UsageError, match="no record with that id in the registry"):
        resolve_record("no-such-id", db)
    with pytest.raises(UsageError, match="a folder"):
        resolve_record(str(tmp_path), db)
