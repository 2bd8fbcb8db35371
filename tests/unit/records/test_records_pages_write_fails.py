"""MEASURED.md and report.html on a disk that cannot take them (issue 22/25 leftovers): the writer removes its own
temp file, the earlier page stays as it was, and verify still passes; write_evidence says it in one line."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from records_synth import make_run

from disk_full import fill_disk
from servepack.errors import ResultsWriteError
from servepack.packs import load_pack
from servepack.pipeline.evidence import write_evidence
from servepack.records.verify import verify_run
from servepack.report import write_run_report
from servepack.report.measured import write_measured

PACK = load_pack(None).pack


def _listing(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.iterdir()) if p.is_file()}


@pytest.mark.parametrize("room", [0, 100])  # full from the start, or full part way through the page
def test_measured_that_does_not_fit_keeps_the_earlier_one_and_leaves_no_temp(tmp_path: Path, room: int,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run(tmp_path / PACK.id, "r")
    earlier = write_measured(run, PACK).read_bytes()
    assert b"**Headline:**" in earlier
    before = _listing(run)
    refused = fill_disk(monkeypatch, room)
    with pytest.raises(OSError) as caught:
        write_measured(run, PACK)
    assert caught.value.errno == errno.ENOSPC and refused
    assert _listing(run) == before  # the same files, MEASURED.md byte for byte; no `.MEASURED.md.*` left
    assert not [p for p in run.iterdir() if p.name.startswith(".")]


def test_measured_that_does_not_fit_the_first_time_leaves_no_file(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run(tmp_path / PACK.id, "r")
    before = _listing(run)
    fill_disk(monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        write_measured(run, PACK)
    assert _listing(run) == before and "MEASURED.md" not in before
    monkeypatch.undo()
    assert verify_run(run).ok


def test_the_page_that_does_not_fit_keeps_the_earlier_one_and_leaves_no_temp(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run(tmp_path / PACK.id, "r")
    earlier = write_run_report(run).read_bytes()
    assert earlier.startswith(b"<!DOCTYPE html>")
    before = _listing(run)
    fill_disk(monkeypatch, 4096)  # part of the page fits, not all of it
    with pytest.raises(OSError, match="No space left"):
        write_run_report(run)
    assert _listing(run) == before and not [p for p in run.iterdir() if p.name.startswith(".")]


def test_write_evidence_on_a_full_disk_is_one_line_and_keeps_both_earlier_pages(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch
                                                                                 ) -> None:
    run = make_run(tmp_path / PACK.id, "r")
    measured, page = write_evidence(run, PACK)
    before = _listing(run)
    assert {measured.name, page.name} <= set(before)
    fill_disk(monkeypatch)
    with pytest.raises(ResultsWriteError) as caught:
        write_evidence(run, PACK)
    msg = str(caught.value)
    assert "\n" not in msg and "the disk is full" in msg and f"servepack report {run}" in msg
    assert _listing(run) == before and not [p for p in run.iterdir() if p.name.startswith(".")]
    monkeypatch.undo()
    assert verify_run(run).ok  # the run is whole: nothing was added or changed in it
