"""local-ai-registry/v1: the seed record loads from its envelope; exports validate and read back."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "records"))  # records_synth
from records_synth import make_run

from servepack.errors import UsageError
from servepack.registry.export import export_records, schema, validate
from servepack.registry.format import load_record, numbers, parse_notes, sample_sentence, summary

FIXTURE = Path(__file__).parents[2] / "fixtures" / "registry" / "laguna_dgx_spark_record.json"


def test_schemas_are_valid_draft_2020_12() -> None:
    for kind in ("recipe", "speed_sweep"):
        doc = schema(kind)  # type: ignore[arg-type]
        assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(doc)


def test_seed_record_loads_from_its_envelope() -> None:
    loaded = load_record(FIXTURE)
    assert loaded.kind == "recipe" and loaded.envelope_meta == {"source": "registry"}
    assert set(loaded.api_fields) == {"huggingface", "registry", "relationships"}
    s = summary(loaded)
    assert s["hardware_id"] == "dgx-spark-gb10-128gb" and s["status"] == "candidate"
    assert s["engine"]["version"] == "1 (04b2b72)"
    assert s["observed_command"]["fidelity"] == "faithful"
    assert s["observed_command"]["arguments"][:3] == ["llama-server", "--model", "laguna-s-2.1-Q4_K_M.gguf"]
    assert s["facts_not_known"]["capabilities.tools"] == "capability-not-verified"


def test_seed_localmaxxing_samples_parse() -> None:
    by_metric = {s.metric: s for s in load_record(FIXTURE).samples}
    decode = by_metric["decode_tok_s"]
    assert decode.samples == (19.2, 19.3, 19.3, 19.3, 19.4, 19.4, 19.4)
    assert decode.stated_median == 19.3 and decode.median == pytest.approx(19.3) and decode.consistent
    ttft = by_metric["ttft_ms"]
    assert len(ttft.samples) == 7 and ttft.samples[0] == 10897.33 and ttft.stated_median == 10431.60
    prefill = by_metric["prefill_tok_s"]
    assert prefill.samples[0] == 751.7 and prefill.stated_median == 785.3 and prefill.consistent


def test_numbers_read_thousands_separators() -> None:
    assert numbers("10,897.33, 10,419.64, and 8,190") == [10897.33, 10419.64, 8190.0]


def test_inconsistent_median_is_flagged() -> None:
    (s,) = parse_notes("Decode samples were 10.0, 11.0, and 30.0 tok/s; median 20.0.")
    assert s.median == 11.0 and not s.consistent


def test_sample_sentence_round_trips_through_the_parser() -> None:
    text = sample_sentence("Fresh TTFT", [1600.004, 1620.25, 1580.251], "ms")
    assert text == "Fresh TTFT samples were 1,600.00, 1,620.25, and 1,580.25 ms; median 1,600.00."
    (s,) = parse_notes(text)
    assert s.metric == "ttft_ms" and s.samples == (1600.0, 1620.25, 1580.25) and s.consistent


def test_stored_form_validates_and_extra_top_level_field_is_refused(tmp_path: Path) -> None:
    data = json.loads(FIXTURE.read_text())["data"]
    for key in ("huggingface", "registry", "relationships"):
        data.pop(key)
    stored = tmp_path / "stored.json"
    stored.write_text(json.dumps(data))
    assert load_record(stored).envelope_meta is None
    data["extra_field"] = 1
    stored.write_text(json.dumps(data))
    with pytest.raises(UsageError, match=r"stored\.json: recipe breaks the registry's rule: \(top level\): Additional "
                       r"properties .* \(upstream schema recipe\.schema\.json\)"):
        load_record(stored)


def test_unknown_fact_needs_a_reason() -> None:
    data = json.loads(FIXTURE.read_text())["data"]
    for key in ("huggingface", "registry", "relationships"):
        data.pop(key)
    del data["facts"]["engine.graph_mode"]["reason"]
    with pytest.raises(UsageError, match=r"facts/engine\.graph_mode: 'reason' is a required property"):
        validate("recipe", data, "seed")


def test_export_validates_and_reads_back(tmp_path: Path) -> None:
    run = make_run(tmp_path / "pack", "20260728T100000Z-run", smoke=(True, True, False))
    recipe_path, sweep_path = export_records(run, tmp_path / "out")
    # a CPU box: servepack's own recipe and sweep beside the registry's collections (they name a lab card)
    assert recipe_path.parent.name == "recipe" and sweep_path.parent.name == "speed-sweep"
    assert recipe_path.parent.parent.name == "servepack"
    recipe = json.loads(recipe_path.read_text())
    sweep = json.loads(sweep_path.read_text())
    assert recipe["status"] == "candidate"  # a native launch is never executable by the registry's trust rules
    assert recipe["metadata"]["servepack"]["status_reason"].startswith("launch kind 'native' is not executable")
    assert recipe["hardware_id"] == "x86-64-cpu"  # the lab's card naming for a CPU box, not a hardware record
    assert not (tmp_path / "out" / "hardware").exists()
    assert (tmp_path / "out" / recipe["metadata"]["servepack"]["lab_run"]).is_file()
    assert recipe["metadata"]["servepack"]["detected_hardware_id"] == "cpu-test-cpu-9000-2c-24gb"
    assert recipe["capabilities"]["tools"] is True and recipe["facts"]["capabilities.tools"]["state"] == "known"
    assert recipe["launch"]["kind"] == "native" and recipe["launch"]["executable"] is True
    assert recipe["metadata"]["servepack"]["tokenized"]["fidelity"] == "faithful"
    assert recipe["speed_sweep_ids"] == [sweep["id"]] and sweep["recipe_id"] == recipe["id"]
    assert recipe["provenance"]["captured_at"].endswith("Z") and sweep["measured_at"].endswith("Z")
    assert sweep["metrics"]["peak_memory_bytes"].isdigit()
    assert [r["context_tokens"] for r in sweep["rows"]] == [256, 1024]
    assert sweep["rows"][0]["decode_tok_s"] == round(36.0 * 0.98, 2)
    loaded = load_record(recipe_path)
    decode = [s for s in loaded.samples if s.metric == "decode_tok_s"]
    assert len(decode) == 2 and len(decode[0].samples) == 3
    assert all(s.consistent for s in loaded.samples)
    notes = recipe["metadata"]["servepack"]["notes"]
    assert "Minimum available RAM was 18.50 GiB and minimum free swap was 1.50 GiB; no guard event occurred." in notes
    assert "Stable configuration: preset default, ctx-size 4096" in notes
    assert load_record(sweep_path).kind == "speed_sweep"


def test_tools_unknown_without_a_smoke_run(tmp_path: Path) -> None:
    run = make_run(tmp_path / "pack", "r", smoke=None)
    recipe = json.loads(export_records(run, tmp_path / "out")[0].read_text())
    assert recipe["capabilities"]["tools"] is None
    assert recipe["facts"]["capabilities.tools"]["state"] == "unknown"
    assert recipe["facts"]["capabilities.tools"]["reason"] == "no-smoke-run-in-this-results-directory"


def test_export_never_overwrites(tmp_path: Path) -> None:
    run = make_run(tmp_path / "pack", "r", smoke=None)
    export_records(run, tmp_path / "out")
    with pytest.raises(UsageError, match="append-only"):
        export_records(run, tmp_path / "out")


def _record_with_notes(tmp_path: Path, old: str, new: str) -> Path:
    text = FIXTURE.read_text()
    assert old in text, "fixture drift"
    path = tmp_path / "record.json"
    path.write_text(text.replace(old, new, 1))
    return path


def _show(path: Path) -> tuple[int, str, BaseException | None]:
    from click.testing import CliRunner

    from servepack.cli.main import cli

    result = CliRunner().invoke(cli, ["registry", "show", str(path)])
    return result.exit_code, result.stderr, result.exception


DECODE = "19.2, 19.3, 19.3, 19.3, 19.4, 19.4, and 19.4 tok/s; median 19.3."


@pytest.mark.parametrize(("new", "what"), [
    ("none; median 19.3.", "samples"),
    ("n/a tok/s; median 19.3.", "samples"),
    ("19.2, 19.3 tok/s; median ,", "median"),
    ("19.2, 19.3 tok/s; median .", "median"),
    ("19.2, 19.3 tok/s; median 1.2.3.", "median"),
    ("19.2, 19.3 tok/s; median ,,,", "median"),
])
def test_notes_whose_samples_or_median_are_not_numbers_are_one_line_exit_2(tmp_path: Path, new: str,
                                                                          what: str) -> None:
    path = _record_with_notes(tmp_path, DECODE, new)
    with pytest.raises(UsageError, match=f"the {what} in"):
        load_record(path).samples  # noqa: B018
    code, err, exc = _show(path)
    assert isinstance(exc, SystemExit) and code == 2
    line = err.strip()
    assert "\n" not in line and line.startswith(f"servepack: error: {path}: metadata.localmaxxing.notes: ")
    assert "Decode samples were 19.2, 19.3, and 19.4 tok/s; median 19.3." in line  # the form to write


def test_notes_in_other_good_wordings_parse(tmp_path: Path) -> None:
    path = _record_with_notes(tmp_path, DECODE, "20 and 21 tok/s; median 20.5.")
    decode = next(s for s in load_record(path).samples if s.metric == "decode_tok_s")
    assert decode.samples == (20.0, 21.0) and decode.stated_median == 20.5 and decode.consistent
    assert _show(path)[0] == 0


@pytest.mark.parametrize(("content", "expect"), [
    (bytes(range(256)) * 8, "not a JSON registry record"),
    (b"[" * 20_000 + b"]" * 20_000, "not a JSON registry record"),
    (b"", "not a JSON registry record"),
])
def test_a_record_file_that_is_not_json_is_one_line_exit_2(tmp_path: Path, content: bytes, expect: str) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(content)
    code, err, exc = _show(path)
    assert isinstance(exc, SystemExit) and code == 2
    assert err.strip().startswith(f"servepack: error: {path}: {expect}") and "\n" not in err.strip()
