"""`servepack reproduce` against the shared fake server: a record made from a fake run holds for decode on the same
fake; a record claiming far more does not; the wrong weights are refused; the seed's dry run launches nothing."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from click.testing import CliRunner
from reproduce_fixtures import FakeRecord

from servepack.cli.main import cli
from servepack.pipeline.reproduce import REPORT_NAME, ReproduceRequest, reproduce
from servepack.records.verify import read_receipt
from servepack.registry.format import load_record
from servepack.reproduce.report import ReproduceReport

SEED = Path(__file__).parents[2] / "fixtures" / "registry" / "laguna_dgx_spark_record.json"


def _cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["reproduce", *args])
    return r.exit_code, r.stdout, r.stderr


def verdict_of(outcome: object, metric: str) -> str:
    return next(v.verdict for v in outcome.verdicts if v.metric == metric)  # type: ignore[attr-defined]


def test_a_record_of_the_fake_reproduces_on_the_same_fake(fake_record: FakeRecord, tmp_path: Path) -> None:
    req = ReproduceRequest(record=str(fake_record.recipe), pack_ref=str(fake_record.pack),
                           server_bin=fake_record.server_bin, out=tmp_path / "run")
    o = reproduce(req)
    assert [c.state for c in o.checks] == ["same", "same", "same"], [c.line() for c in o.checks]
    decode = next(v for v in o.verdicts if v.metric == "decode_tok_s")
    assert decode.verdict == "REPRODUCED", decode.reason
    assert decode.cell == "64 ctx × 32 gen @c1" and decode.run is not None and decode.run.n == 5
    assert {v.metric for v in o.verdicts} == {"decode_tok_s", "prefill_tok_s", "ttft_ms"}
    # the launch went through the engine seam with the record's flags and a local port
    assert o.argv[0] == str(fake_record.server_bin.resolve())
    assert o.argv[o.argv.index("--ctx-size") + 1] == "512" and "--jinja" in o.argv
    # the verdicts are in the run, under its receipt, and the note names the original
    receipt = read_receipt(tmp_path / "run")
    assert REPORT_NAME in receipt.files and receipt.kind == "reproduce"
    report = json.loads((tmp_path / "run" / REPORT_NAME).read_text())
    typed = ReproduceReport.model_validate(report)
    assert typed.schema_version == "servepack.reproduce/v1" and typed.comparable is True
    assert [v.verdict for v in typed.verdicts if v.metric == "decode_tok_s"] == ["REPRODUCED"]
    assert report["record"]["sha256"] == hashlib.sha256(fake_record.recipe.read_bytes()).hexdigest()
    assert any(n.startswith("Reproduction of registry record ") for n in receipt.notes)
    # the registry records of the reproduction validate and name the original record
    assert o.exported is not None, o.export_error
    recipe = load_record(o.exported[0])
    repro = recipe.record["metadata"]["servepack"]["reproduces"]
    assert repro["record_id"] == load_record(fake_record.recipe).record["id"]
    assert repro["record_sha256"] == report["record"]["sha256"]
    assert {"kind": "reproduced-record", "url": fake_record.recipe.resolve().as_uri()}.items() <= \
        next(s for s in recipe.record["provenance"]["sources"] if s["kind"] == "reproduced-record").items()
    assert load_record(o.exported[1]).kind == "speed_sweep"
    # MEASURED.md and report.html beside it, as a bench leaves them (there were none)
    assert (tmp_path / "run" / "MEASURED.md").is_file() and (tmp_path / "run" / "report.html").is_file()


def test_a_record_claiming_a_much_faster_decode_is_slower_here(fake_record: FakeRecord, tmp_path: Path) -> None:
    doc = json.loads(fake_record.recipe.read_text())
    notes = doc["metadata"]["servepack"]["notes"]
    fast = "Decode samples were 1,000.00, 1,001.00, 999.00, 1,000.50, and 1,000.20 tok/s; median 1,000.20."
    doc["metadata"]["servepack"]["notes"], n = re.subn(r"Decode samples were [^;]+; median [\d,.]+\.", fast, notes)
    assert n == 1
    claimed = tmp_path / "claims-1000.json"
    claimed.write_text(json.dumps(doc))
    code, out, err = _cli(str(claimed), str(fake_record.pack), "--server-bin", str(fake_record.server_bin),
                          "--out", str(tmp_path / "run"))
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("decode_tok_s"))
    assert " SLOWER " in line and "REPRODUCED" not in line
    assert "lies below the band" in line and "record 1,000.20" in line
    assert "not reproduced: decode_tok_s at 64 ctx × 32 gen @c1 (SLOWER)" in out


def test_weights_that_are_not_the_records_are_refused_before_launch(fake_record: FakeRecord, tmp_path: Path) -> None:
    other = tmp_path / "other.gguf"
    other.write_bytes(fake_record.pack.with_name("tiny.gguf").read_bytes() + b"\0")
    code, out, err = _cli(str(fake_record.recipe), str(fake_record.pack), "--server-bin",
                          str(fake_record.server_bin), "--model-file", str(other), "--out", str(tmp_path / "run"))
    assert code == 2 and out == ""
    line = err.strip().splitlines()[-1]  # progress lines come first on stderr
    assert line.startswith("servepack: error: refused: record pins sha256 ")
    assert f"local {other} sha256 " in line and "--model-file with the record's weights" in line
    assert not (tmp_path / "run").exists()


def test_a_different_engine_build_is_not_comparable(fake_record: FakeRecord, tmp_path: Path) -> None:
    other_bin = tmp_path / "llama-server"
    other_bin.write_text(fake_record.server_bin.read_text() + "# another build\n")
    other_bin.chmod(0o755)
    o = reproduce(ReproduceRequest(record=str(fake_record.recipe), pack_ref=str(fake_record.pack),
                                   server_bin=other_bin, out=tmp_path / "run"))
    engine = next(c for c in o.checks if c.what == "engine build")
    assert engine.state == "differs" and "binary sha256" in engine.detail
    assert {v.verdict for v in o.verdicts} == {"NOT_COMPARABLE"}
    assert all(v.reason.startswith("engine build differs") for v in o.verdicts)


def test_the_seed_dry_run_prints_the_translation_and_not_comparable(_isolated_results: Path) -> None:
    code, out, err = _cli(str(SEED), "--dry-run")
    assert code == 0, err
    assert "pack laguna-s-2.1-dgx-spark" in out
    hw = next(ln for ln in out.splitlines() if ln.strip().startswith("hardware:"))
    assert "DIFFERS" in hw and "dgx-spark-gb10-128gb" in hw
    assert "→ NOT_COMPARABLE" in out
    argv = next(ln for ln in out.splitlines() if "--ctx-size 9280" in ln)
    assert "--model " in argv and "--host 127.0.0.1" in argv and "--port 8000" not in argv
    assert "rewritten: --port 8000 → a free loopback port chosen at launch" in out
    assert "passed-unknown: --context-checkpoints 0" in out
    assert "protocol: context marks 8,192 × 1,024 generated tokens @ concurrency 1; 7 samples per cell" in out
    assert out.rstrip().endswith("dry run: nothing launched")
    assert list(_isolated_results.iterdir()) == []
    code, out, _ = _cli(str(SEED), "--dry-run", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["dry_run"] is True and doc["comparable"] is False and doc["verdicts"] == []
    assert doc["launch"]["flags"]["ctx-size"] == 9280 and doc["protocol"]["samples"] == 7


def test_an_id_in_the_local_registry_is_reproduced_with_its_provenance(fake_record: FakeRecord,
                                                                       tmp_path: Path) -> None:
    db = tmp_path / "registry.sqlite3"
    imported = CliRunner().invoke(cli, ["registry", "import", str(fake_record.recipe), str(fake_record.sweep),
                                        "--db", str(db)])
    assert imported.exit_code == 0, imported.stderr
    rid = load_record(fake_record.recipe).record["id"]
    code, out, err = _cli(rid, str(fake_record.pack), "--server-bin", str(fake_record.server_bin), "--db", str(db),
                          "--dry-run", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["record"]["id"] == rid and doc["record"]["held"] == f"registry id {rid} version 1 of 1"
    assert doc["record"]["sha256"] == hashlib.sha256(fake_record.recipe.read_bytes()).hexdigest()
    assert doc["comparable"] is True and doc["protocol"]["context_marks"] == [64]
    code, _, err = _cli("no-such-record-id", "--db", str(db), "--dry-run")
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("servepack: error: no-such-record-id: no such file, and no "
                                                   "record with that id in the registry")
