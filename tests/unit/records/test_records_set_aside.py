"""Records with samples set aside (v2 requests): the figures, the headline and verify use the clean samples only;
a cell left with none is never claim-grade. Records from before (v1) keep their old reading: see
test_records_noisy.py, whose runs are v1."""

from __future__ import annotations

import json
from pathlib import Path

from records_synth import make_run

from servepack.bench.config import BenchSettings
from servepack.bench.summary import BenchSummary
from servepack.packs import load_pack
from servepack.records.claims import select_headline
from servepack.records.receipt import hash_files
from servepack.records.verify import verify_run
from servepack.report.measured import write_measured

PACK = load_pack(None).pack
# rounds 1 and 4 ran beside a hog: slow, contended, set aside; the other five are tight
DECODE = (36.0, 4.0, 36.1, 35.9, 5.0, 36.05, 35.95)


def _bench(run: Path) -> BenchSummary:
    return BenchSummary.model_validate_json((run / "server_bench.json").read_text())


def test_set_aside_samples_are_in_no_figure_and_the_clean_ones_make_the_headline(tmp_path: Path) -> None:
    run = make_run(tmp_path / PACK.id, "shared-vm", decode=DECODE, prefill=(160.0,) * 7, watched=True,
                   contended_rounds=(1, 4), set_aside=True)
    cell = _bench(run).cells[1]
    assert (cell.n, cell.n_clean, cell.n_set_aside, cell.contended) == (7, 5, 2, 2)
    # Wrong answer: a median over all seven would be 35.95; the clean median is 36.00, and no slow value is in it
    assert cell.decode_tok_s_server.median == 36.0 and cell.decode_tok_s_server.n == 5
    assert cell.decode_tok_s_server.min == 35.9
    text = write_measured(run, PACK).read_text()
    (head,) = [ln for ln in text.splitlines() if ln.startswith("**Headline:**")]
    assert "**36.00**" in head and "(median of 5, 95% CI" in head
    assert ("5 clean samples (2 of 7 samples set aside (2 host contended: others held 1.02 of 2 cores (51%): "
            "python3 (pid 4242) 0.98 cores), replaced; in no figure), within the ±3% target") in head
    assert "host quiet" not in head
    assert verify_run(run).ok  # every figure recomputes from requests.jsonl with the set-aside ones left out


def test_a_cell_with_only_contended_samples_is_never_the_headline(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    make_run(root, "a-quiet", ended_at="2026-07-27T10:00:00.000Z", decode=(36.0, 36.1, 35.9, 36.05, 35.95),
             prefill=(160.0,) * 5, watched=True, set_aside=True)
    busy = make_run(root, "b-busy", ended_at="2026-07-28T10:00:00.000Z", decode=(4.0, 5.0, 4.5, 4.2, 4.8),
                    prefill=(40.0,) * 5, watched=True, contended_rounds=range(5), set_aside=True)
    cell = _bench(busy).cells[1]
    assert cell.n_clean == 0 and cell.figures_contended and cell.decode_tok_s_server.median == 4.5
    text = write_measured(busy, PACK).read_text()
    (head,) = [ln for ln in text.splitlines() if ln.startswith("**Headline:**")]
    assert "run `a-quiet`" in head and "b-busy" not in head
    note = next(ln for ln in text.splitlines() if ln.startswith("- Not the headline: `b-busy`"))
    assert "4.50 (median of 5" in note  # shown, labelled
    assert ("noisy: no clean sample: the figures are from contended ones; 5 of 5 samples set aside (5 host "
            "contended: ") in note
    assert select_headline([], PACK.claims).run is None


def test_records_from_before_the_prefill_rename_read_and_verify(tmp_path: Path) -> None:
    """v1 records named both prefill quantities "prefill_tok_s_*"; they read into the new names and verify."""
    run = make_run(tmp_path / PACK.id, "old", decode=(36.0, 36.1, 35.9), prefill=(160.0, 158.0, 162.0))
    for name in ("requests.jsonl", "server_bench.json"):
        path = run / name
        text = path.read_text().replace("prompt_eval_tok_s_server", "prefill_tok_s_server")
        path.chmod(0o644)
        path.write_text(text.replace("prompt_per_ttft_tok_s_client", "prefill_tok_s_client"))
    doc = (run / "server_bench.json").read_text()
    assert "prefill_tok_s_client" in doc and "prompt_per_ttft" not in doc
    cell = _bench(run).cells[1]
    assert cell.prompt_per_ttft_tok_s_client.median == 160.0  # prompt ÷ TTFT, the client's
    assert cell.prompt_eval_tok_s_server.median == 168.0  # the server's prompt eval rate (synth: 1.05 ×)
    # a pack judging prefill: the old interval metric name reads as the new field
    old = _bench(run).settings.model_dump(mode="json")
    old["interval_metric"] = "prefill_tok_s_server"
    assert BenchSettings.model_validate(old).interval_metric == "prompt_eval_tok_s_server"
    # the receipt hashes the files as they were written then: seal the old-named ones, as an old run's receipt did
    receipt = run / "receipt.json"
    doc = json.loads(receipt.read_text())
    doc["files"] = hash_files(run, [run / name for name in doc["files"]])
    receipt.chmod(0o644)
    receipt.write_text(json.dumps(doc))
    report = verify_run(run)
    assert report.ok, [m.line() for m in report.mismatches]


def test_an_export_states_the_samples_behind_the_figures_so_a_reproduction_plans_as_many(tmp_path: Path) -> None:
    from servepack.records.claims import load_run
    from servepack.registry.export import sweep_row
    from servepack.registry.export.export import _cell_sentence
    from servepack.reproduce.protocol import _SP_CELL

    run = make_run(tmp_path / PACK.id, "shared-vm", decode=DECODE, prefill=(160.0,) * 7, watched=True,
                   contended_rounds=(1, 4), set_aside=True)
    view = load_run(run)
    cell = _bench(run).cells[1]
    key = (cell.context_tokens, cell.concurrency, cell.gen_tokens)
    assert view.cells()[key].n_set_aside == 2
    # Wrong answer: all 7 rounds (2 of them set aside) would make a reproduction plan 7 samples where 5 were planned
    assert sweep_row(cell, None, False)["samples"] == 5
    sentence = _cell_sentence(view, key, cell)
    match = _SP_CELL.search(sentence)
    assert match is not None and (match.group(3), match.group(4)) == ("5", "5")
    assert "2 more were set aside (host contended or stalled), replaced, and are in no figure." in sentence
