"""Issue 25 item 7: a record's `--api-key VALUE` (and its other secrets) never land in reproduce.json, the run's files
or the exported records — every file walked."""

from __future__ import annotations

import json
from pathlib import Path

from reproduce_fixtures import FakeRecord

from secret_walk import leaks
from servepack.pipeline.reproduce import REPORT_NAME, ReproduceRequest, reproduce
from servepack.redact import REDACTED

KEY = "sk-record-0f1e2d3c4b5a6978"
TOKEN = "hf_recordtoken5a6b7c8d9e"


def _keyed_record(fake_record: FakeRecord, directory: Path, key_file: Path) -> Path:
    doc = json.loads(fake_record.recipe.read_text())
    meta = next(v for v in doc["metadata"].values() if isinstance(v, dict) and "tokenized" in v)
    keyed = ["--api-key", KEY, f"--hf-token={TOKEN}", "--api-key-file", str(key_file)]
    meta["tokenized"]["arguments"] += keyed
    doc["launch"]["arguments"] += keyed  # the record's own launch, which reproduce runs (issue 33)
    out = directory / "keyed.json"
    out.write_text(json.dumps(doc))
    return out


def test_a_records_api_key_is_in_no_file_servepack_writes(fake_record: FakeRecord, tmp_path: Path) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    record = _keyed_record(fake_record, inputs, Path("/nonexistent/recorded-host.keys"))
    results = tmp_path / "results"
    o = reproduce(ReproduceRequest(record=str(record), pack_ref=str(fake_record.pack),
                                   server_bin=fake_record.server_bin, out=results / "run",
                                   export=results / "export"))
    assert o.exported is not None, o.export_error
    report = json.loads((results / "run" / REPORT_NAME).read_text())
    recorded = report["launch"]["recorded"]
    assert recorded[recorded.index("--api-key") + 1] == REDACTED and f"--hf-token={REDACTED}" in recorded
    assert "--api-key" not in report["launch"]["argv"]  # dropped from the launch, as before
    files = [p for p in results.rglob("*") if p.is_file()]
    assert len(files) >= 6, files
    for path in files:
        data = path.read_bytes()
        assert KEY.encode() not in data and TOKEN.encode() not in data, f"a secret leaked into {path}"


def test_the_dry_run_report_redacts_too(fake_record: FakeRecord, tmp_path: Path) -> None:
    record = _keyed_record(fake_record, tmp_path, tmp_path / "k")
    o = reproduce(ReproduceRequest(record=str(record), pack_ref=str(fake_record.pack),
                                   server_bin=fake_record.server_bin, dry_run=True))
    text = json.dumps(o.as_dict())
    assert KEY not in text and TOKEN not in text and REDACTED in text


SHORT = ("Zq~", "Yw~", "Xv~", "9753108")  # below every by-value threshold, and a number


def _short_keyed_record(fake_record: FakeRecord, directory: Path) -> Path:
    doc = json.loads(fake_record.recipe.read_text())
    meta = next(v for v in doc["metadata"].values() if isinstance(v, dict) and "tokenized" in v)
    meta["tokenized"]["arguments"] += ["--api-key", "Zq~", "--hf-token=Yw~"]
    doc["launch"]["arguments"] += ["--api-key", "Zq~", "--hf-token=Yw~"]  # the launch reproduce runs (issue 33)
    meta["observed"] = {"command": "LLAMA_API_KEY=Xv~ llama-server --api-key=Zq~", "env": {"HF_TOKEN": 9753108,
                        "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}}
    out = directory / "short-keyed.json"
    out.write_text(json.dumps(doc))
    return out


def test_a_records_short_keys_are_in_no_file_nor_in_what_is_shown(fake_record: FakeRecord, tmp_path: Path) -> None:
    inputs, results = tmp_path / "inputs", tmp_path / "results"
    inputs.mkdir()
    record = _short_keyed_record(fake_record, inputs)
    o = reproduce(ReproduceRequest(record=str(record), pack_ref=str(fake_record.pack),
                                   server_bin=fake_record.server_bin, out=results / "run",
                                   export=results / "export"))
    assert o.exported is not None, o.export_error
    recorded = json.loads((results / "run" / REPORT_NAME).read_text())["launch"]["recorded"]
    assert recorded[recorded.index("--api-key") + 1] == REDACTED and f"--hf-token={REDACTED}" in recorded
    assert len([p for p in results.rglob("*") if p.is_file()]) >= 6
    assert leaks(results, SHORT) == []
    shown = json.dumps(o.as_dict())
    assert not [k for k in SHORT if f'"{k}"' in shown or f"={k}" in shown or f" {k}" in shown]
    dry = json.dumps(reproduce(ReproduceRequest(record=str(record), pack_ref=str(fake_record.pack),
                                                server_bin=fake_record.server_bin, dry_run=True)).as_dict())
    assert not [k for k in SHORT if f'"{k}"' in dry or f"={k}" in dry or f" {k}" in dry]
