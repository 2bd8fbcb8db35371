"""The same run and record give the same verdicts everywhere: `reproduce` (its reproduce.json), then `compare RUN
RECORD` and the report's registry section on the run it made. A record claiming more than the run is SLOWER in all
three; a record of another host is NOT_COMPARABLE in all three."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from reproduce_fixtures import FakeRecord

from servepack.cli.main import cli
from servepack.pipeline.reproduce import REPORT_NAME, ReproduceRequest, reproduce
from servepack.registry.format import load_record
from servepack.report.page import render_report
from servepack.report.sources import load_source

Triple = tuple[str, str, str]


def _variant(fake: FakeRecord, name: str, edit: Any) -> Path:
    doc = json.loads(fake.recipe.read_text())
    edit(doc)
    out = fake.recipe.parent / name  # beside the original, so its speed sweep is found the same way
    out.write_text(json.dumps(doc))
    return out


def three_ways(fake: FakeRecord, record: Path, out: Path) -> tuple[dict[str, list[Triple]], dict[str, Any]]:
    """reproduce's verdicts, then compare's and the report's on the run reproduce made."""
    o = reproduce(ReproduceRequest(record=str(record), pack_ref=str(fake.pack), server_bin=fake.server_bin, out=out))
    assert o.run_dir == out
    written = json.loads((out / REPORT_NAME).read_text())
    r = CliRunner().invoke(cli, ["compare", str(out), str(record), "--json"])
    assert r.exit_code == 0, r.output
    compared = json.loads(r.stdout)
    page = render_report([load_source(out)], [load_record(record)])
    shown = re.findall(r"<span class='verdict ([A-Z_]+)' data-cell='([^']+)' data-metric='([^']+)'>", page)
    found = {
        "reproduce": [(v.cell, v.metric, v.verdict) for v in o.verdicts],
        "reproduce.json": [(v["cell"], v["metric"], v["verdict"]) for v in written["verdicts"]],
        "compare --json": [(v["cell"], v["metric"], v["verdict"]) for v in compared["verdicts"]],
        "report": [(c.replace("&#215;", "×"), m, v) for v, c, m in shown],
    }
    assert found["reproduce"], found
    for where, triples in found.items():
        assert triples == found["reproduce"], (where, found)
    # the facts too, word for word: the session's as reproduce judged them, the receipt's as compare reads them
    assert compared["comparability"] == written["comparability"]
    assert compared["comparable"] == written["comparable"]
    return found, compared


def test_a_record_of_the_fake_gets_one_answer_from_all_three(fake_record: FakeRecord, tmp_path: Path) -> None:
    found, compared = three_ways(fake_record, fake_record.recipe, tmp_path / "run")
    decode = [v for _, m, v in found["reproduce"] if m == "decode_tok_s"]
    assert decode == ["REPRODUCED"]
    assert [c["state"] for c in compared["comparability"]] == ["same", "same", "same"]


def test_a_record_claiming_more_is_slower_in_all_three(fake_record: FakeRecord, tmp_path: Path) -> None:
    fast = "Decode samples were 1,000.00, 1,001.00, 999.00, 1,000.50, and 1,000.20 tok/s; median 1,000.20."

    def claim_more(doc: dict[str, Any]) -> None:
        notes = doc["metadata"]["servepack"]["notes"]
        doc["metadata"]["servepack"]["notes"] = re.sub(r"Decode samples were [^;]+; median [\d,.]+\.", fast, notes)

    record = _variant(fake_record, "claims-1000.json", claim_more)
    found, _ = three_ways(fake_record, record, tmp_path / "run")
    assert [v for _, m, v in found["reproduce"] if m == "decode_tok_s"] == ["SLOWER"]


def test_a_record_of_another_host_is_not_comparable_in_all_three(fake_record: FakeRecord, tmp_path: Path) -> None:
    def another_host(doc: dict[str, Any]) -> None:
        doc["metadata"]["servepack"]["detected_hardware_id"] = "cpu-another-box-64c-512gb"

    record = _variant(fake_record, "another-host.json", another_host)
    found, compared = three_ways(fake_record, record, tmp_path / "run")
    assert {v for _, _, v in found["reproduce"]} == {"NOT_COMPARABLE"}
    assert [c["state"] for c in compared["comparability"]] == ["differs", "same", "same"]
