"""The issue's scenario through `servepack run`: a quiet run binds; a run beside a CPU-bound process is recorded,
its samples marked contended, its claim refused in one line, and the quiet headline still binds."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from core_fixtures import make_pack

from quiet_host import QuietHost
from servepack.errors import ClaimRefused
from servepack.host.contention import ContentionWatch, ExcludeSet
from servepack.packs import load_pack
from servepack.pipeline import run as run_module
from servepack.pipeline.run import run_pack
from servepack.plan import RunOptions
from servepack.records.verify import verify_run
from servepack.session import Session
from servepack.testing.processes import cpu_hog as hog


def _pack(tmp_path: Path) -> Path:
    path = make_pack(tmp_path)
    text = path.read_text()
    # a contended sample is set aside and replaced after a wait for quiet: the hog never leaves, so cap the cell
    text = text.replace("context_marks = [64]\n", "context_marks = [64]\ngen_tokens = 16\nsamples = 3\n"
                                                   "max_cell_s = 6\n")
    text = text.replace("[claims]\n", "[claims]\ninterval_target_pct = 25\n")
    text = text.replace("gen_tokens = 8\n", "gen_tokens = 16\n")
    path.write_text(text)
    assert load_pack(str(path)).pack.claims.interval_target_pct == 25
    return path


@pytest.fixture
def cpu_hog() -> Iterator[int]:
    """A bounded busy loop outside this process's tree (reparented away from us), as another user's job is."""
    with hog(1.0, 180, settle_s=0.3) as (pid,):
        yield pid


def _receipt(run: Path) -> dict[str, object]:
    doc: dict[str, object] = json.loads((run / "receipt.json").read_text())
    return doc


def test_a_run_beside_a_cpu_hog_is_recorded_refused_and_never_the_headline(
    tmp_path: Path, fake_server_bin: Path, cpu_hog: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    pack = _pack(tmp_path)
    root = tmp_path / "results" / "tiny-test"

    def quiet_watch(session: Session) -> ContentionWatch:
        return ContentionWatch(ExcludeSet([os.getpid()]), reader=QuietHost())

    with monkeypatch.context() as m:
        m.setattr(run_module, "watch_for", quiet_watch)
        quiet = run_pack(str(pack), options=RunOptions(out=root / "a-quiet", server_bin=fake_server_bin), suites=[])
    assert quiet.receipt is not None
    assert quiet.receipt.claim.eligible, quiet.receipt.claim.reasons
    assert quiet.bench is not None
    cell = quiet.bench.cells[0]
    assert cell.contended == 0 and cell.stalls == 0 and cell.n >= 5
    assert cell.interval is not None and cell.interval.met and cell.interval.stopped_by == "target met"
    report = verify_run(root / "a-quiet")  # every figure, the interval included, recomputes from requests.jsonl
    assert report.ok, report

    said: list[str] = []
    with pytest.raises(ClaimRefused) as info:
        run_pack(str(pack), options=RunOptions(out=root / "b-hog", server_bin=fake_server_bin, claim=True,
                                               progress=said.append), suites=[])
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("claim refused: noisy: ctx 64 × c1: ")
    # every sample contended, set aside: the figures are the contended ones, labelled, and the reason counts them
    assert re.search(r"no clean sample: the figures are from contended ones; (\d+) of \1 samples set aside \(\1 "
                     r"host contended: others held \d+\.\d\d of \d+ cores \(\d+%\)", msg), msg
    assert msg.endswith(f"(recorded in {root / 'b-hog'})")
    # Before measuring it said the host was busy, and who: never silently.
    busy = [s for s in said if s.startswith("WARNING host busy: others held ")]
    assert busy and "marked contended" in busy[0]
    assert any(s.startswith("claim: ineligible (noisy: ") for s in said)

    hog = root / "b-hog"
    r = _receipt(hog)
    assert r["status"] == "complete"
    claim = r["claim"]
    assert isinstance(claim, dict) and claim["eligible"] is False and claim["requested"] is True
    assert any(str(x).startswith("noisy: ctx 64 × c1: ") for x in claim["reasons"])
    samples = [json.loads(ln) for ln in (hog / "requests.jsonl").read_text().splitlines()]
    assert samples and all(s["contended"] for s in samples if not s["warmup"])
    contention = json.loads((hog / "host_contention.json").read_text())
    assert contention["samples_contended"] == contention["samples"] > 0
    assert "host_contention.json" in r["files"]  # type: ignore[operator]

    assert verify_run(hog).ok
    measured = (hog / "MEASURED.md").read_text()
    (head,) = [ln for ln in measured.splitlines() if ln.startswith("**Headline:**")]
    assert "run `a-quiet`" in head and "b-hog" not in head
    assert any(ln.startswith("- Not the headline: `b-hog`") and "samples set aside" in ln
               for ln in measured.splitlines())


def test_a_stop_in_the_first_request_is_set_aside_replaced_and_named_in_the_receipt(
    tmp_path: Path, fake_server_bin: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's fault run, small: the server stops (SIGSTOP-like) for 6 s before the first token of the first
    request. With the pack's floor at 2 s the stream is cut there, the server checked, the sample set aside and
    replaced; the receipt says so and the headline comes from the clean samples."""
    pack = _pack(tmp_path)
    pack.write_text(pack.read_text().replace("max_cell_s = 6\n", "max_cell_s = 30\nstall_floor_s = 2\n"))
    monkeypatch.setenv("FAKE_FREEZE", "1,0,6")
    monkeypatch.setattr(run_module, "watch_for",
                        lambda session: ContentionWatch(ExcludeSet([os.getpid()]), reader=QuietHost()))
    out = tmp_path / "results" / "tiny-test" / "freeze"
    t0 = time.monotonic()
    result = run_pack(str(pack), options=RunOptions(out=out, server_bin=fake_server_bin), suites=[])
    assert time.monotonic() - t0 < 60
    samples = [json.loads(ln) for ln in (out / "requests.jsonl").read_text().splitlines()]
    first = samples[0]
    assert first["stalled"] and not first["ok"] and first["stall_bound_s"] == 2.0
    assert first["e2e_ms"] < 4000  # cut at the floor plus the server check, not after the 6 s stop
    # stopped: no answer, and (a tick of reading the check's request at most) no CPU
    assert re.search(r"server check: /health unanswered within 1 s, server CPU 0\.0\d s meanwhile",
                     first["set_aside"]), first["set_aside"]
    assert all(not s["stalled"] for s in samples[1:])
    assert result.bench is not None
    cell = result.bench.cells[0]
    assert cell.stalls == 1 and cell.n_set_aside == 1 and cell.n_clean == cell.n - 1 >= 5
    r = _receipt(out)
    notes = [n for n in r["notes"] if str(n).startswith("bench ctx 64 × c1: 1 of ")]  # type: ignore[union-attr]
    assert len(notes) == 1 and "samples set aside (1 stalled)" in str(notes[0]) and "in no figure" in str(notes[0])
    claim = r["claim"]
    assert isinstance(claim, dict) and claim["eligible"] is True, claim
    assert verify_run(out).ok
