"""A record whose notes state absurd cells (2**63 context tokens, 10**20 generated) is refused in one line before
anything is planned; a sample count past the cap asks for --samples. The honest record's protocol is unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.errors import UsageError
from servepack.registry.format import load_record
from servepack.reproduce.protocol import protocol_of

FIXTURE = Path(__file__).parents[2] / "fixtures" / "registry" / "laguna_dgx_spark_record.json"


def _notes_replaced(tmp_path: Path, old: str, new: str) -> Path:
    doc = json.loads(FIXTURE.read_text())

    def walk(o: Any) -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                if k == "notes" and isinstance(v, str):
                    o[k] = v.replace(old, new)
                else:
                    walk(v)
        elif isinstance(o, list):
            for x in o:
                walk(x)

    walk(doc)
    path = tmp_path / "record.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(("old", "new", "words"), [
    ("8,192", "9,223,372,036,854,775,808", "context tokens 9,223,372,036,854,775,808, outside 1 to 16,777,216"),
    ("1,024", "99,999,999,999,999,999,999", "generated tokens 99,999,999,999,999,999,999, outside 1 to 16,777,216"),
])
def test_a_record_with_an_absurd_cell_is_refused_before_planning(tmp_path: Path, old: str, new: str,
                                                                 words: str) -> None:
    record = _notes_replaced(tmp_path, old, new)
    result = CliRunner().invoke(cli, ["reproduce", str(record), "--dry-run"])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0] == f"servepack: error: {record}: a cell states {words}; this record cannot be reproduced as " \
        "stated: fix the record"


def test_the_honest_record_keeps_its_protocol_and_a_huge_sample_count_asks_for_samples() -> None:
    protocol = protocol_of(load_record(FIXTURE))
    assert protocol is not None
    assert (protocol.context_marks, protocol.gen_tokens, protocol.concurrency, protocol.samples) == ((8192,), 1024,
                                                                                                      (1,), 7)
    assert protocol.bench_overrides(None)["samples"] == 7 and protocol.bench_overrides(200)["samples"] == 200
    with pytest.raises(UsageError, match="10,001 samples per cell, outside 1 to 10,000; give --samples N"):
        protocol.bench_overrides(10_001)
