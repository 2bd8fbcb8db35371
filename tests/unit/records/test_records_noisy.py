"""A noisy run (contended host, wide interval, too few samples) is shown labelled, never as the headline, never
binding; a new tip that moved beyond its interval is called out with the likely cause from recorded facts."""

from __future__ import annotations

from pathlib import Path

from records_synth import make_run

from servepack.packs import load_pack
from servepack.records.claims import history, select_headline
from servepack.report.measured import write_measured

PACK = load_pack(None).pack
QUIET = (36.0, 36.1, 35.9, 36.05, 35.95)
NOISY_REASON = "noisy: ctx 1,024 × c1: 3/5 samples contended"


def _headline(text: str) -> str:
    (head,) = [ln for ln in text.splitlines() if ln.startswith("**Headline:**")]
    return head


def _row(text: str, run: str) -> str:
    return next(ln for ln in text.splitlines() if f"run `{run}`" in ln and ln.startswith("|"))


def test_a_quiet_tight_run_is_the_headline_with_its_interval(tmp_path: Path) -> None:
    run = make_run(tmp_path / PACK.id, "quiet", decode=QUIET, prefill=(160.0,) * 5, watched=True)
    head = _headline(write_measured(run, PACK).read_text())
    assert "**36.00**" in head and "run `quiet`" in head
    assert "(median of 5, 95% CI 35." in head and "(±0." in head
    assert "host quiet (0/5 samples contended), no stalls, within the ±3% target" in head


def test_a_contended_newer_run_does_not_replace_the_quiet_headline(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    make_run(root, "a-quiet", ended_at="2026-07-27T10:00:00.000Z", decode=QUIET, prefill=(160.0,) * 5, watched=True)
    noisy = make_run(root, "b-hog", ended_at="2026-07-28T10:00:00.000Z", decode=(4.25, 30.0, 5.0, 31.0, 4.9),
                     prefill=(40.0,) * 5, watched=True, contended_rounds=(0, 2, 4),
                     claim_reasons=["noisy: ctx 1,024 × c1: 3/5 samples contended"])
    text = write_measured(noisy, PACK).read_text()
    head = _headline(text)
    assert "**36.00**" in head and "run `a-quiet`" in head and "4.90" not in head
    note = next(ln for ln in text.splitlines() if ln.startswith("- Not the headline: `b-hog`"))
    assert "5.00 (median of 5, 95% CI" in note
    assert "noisy: 3/5 samples contended (others held 1.02 of 2 cores (51%): python3 (pid 4242) 0.98 cores)" in note
    row = _row(text, "b-hog")
    assert "**noisy: ctx 256: 3/5 samples contended" in row and "never binding, never a headline**" in row
    assert "ctx 1,024: 3/5 samples contended" in row
    assert "the tip is `a-quiet`" in row
    quiet_row = _row(text, "a-quiet")
    assert "tip 2026-07-27 10:00 UTC" in quiet_row and "noisy" not in quiet_row
    assert ("- `b-hog` · run · complete · 2026-07-28 10:00 UTC · cpu-generic · bench noisy, never binding; its smoke "
            "suites bind") in text
    assert "- `a-quiet` · run · complete · 2026-07-27 10:00 UTC · cpu-generic · binds (tip of its kind)" in text


def test_a_wide_interval_is_noisy_even_on_a_quiet_host(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    make_run(root, "a-quiet", ended_at="2026-07-27T10:00:00.000Z", decode=QUIET, prefill=(160.0,) * 5, watched=True)
    wide = make_run(root, "b-wide", ended_at="2026-07-28T10:00:00.000Z", decode=(30.0, 36.0, 33.0, 39.0, 27.0),
                    prefill=(160.0,) * 5, watched=True)
    choice = select_headline(history(wide), PACK.claims)
    assert choice.run is not None and choice.run.path.name == "a-quiet"
    ((run, reason),) = choice.noisy
    assert run.path.name == "b-wide"
    assert reason.startswith("noisy: decode_tok_s_server median 33.00, 95% interval ±")
    assert reason.endswith("> target ±3% (n=5)")


def test_three_samples_are_too_few_for_a_claim_grade_headline(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    few = make_run(root, "few", decode=(36.0, 36.1, 35.9), watched=True)
    text = write_measured(few, PACK).read_text()
    head = _headline(text)
    assert head.startswith("**Headline:** none — no complete run of preset default measured 1,024 prompt tokens")
    assert "on a quiet host within the ±3% interval target (1 noisy run passed over)" in head
    assert "decode_tok_s_server: too few for an interval (n=3 < 5)" in _row(text, "few")


def test_older_runs_without_quality_facts_stay_headlines_and_say_so(tmp_path: Path) -> None:
    run = make_run(tmp_path / PACK.id, "legacy", decode=(36.0, 36.4, 35.7))
    head = _headline(write_measured(run, PACK).read_text())
    assert "run `legacy`" in head and "too few for an interval (n=3 < 5)" in head
    assert "measurement quality not recorded" in head and "95% CI" not in head


def test_a_tip_that_moved_beyond_its_interval_is_called_out_with_the_cause(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    make_run(root, "a-quiet", ended_at="2026-07-27T10:00:00.000Z", decode=QUIET, prefill=(160.0,) * 5, watched=True)
    new = make_run(root, "b-rebuilt", ended_at="2026-07-28T10:00:00.000Z", decode=(30.0, 30.1, 29.9, 30.05, 29.95),
                   prefill=(160.0,) * 5, watched=True, engine_sha="f" * 64)
    text = write_measured(new, PACK).read_text()
    assert "run `b-rebuilt`" in _headline(text)  # claim-grade: it binds, and the move is stated
    line = next(ln for ln in text.splitlines() if ln.startswith("- `default` ctx 1,024 × c1"))
    assert "decode_tok_s_server **30.00** in `b-rebuilt` vs 36.00 in `a-quiet` (-16.7%; outside the new run's 95% " \
           "interval 29.90–30.10)" in line
    assert "Likely cause: engine binary changed (sha256 eeeeeeee… → ffffffff…)." in line


def test_a_noisy_run_that_moved_names_contention(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    make_run(root, "a-quiet", ended_at="2026-07-27T10:00:00.000Z", decode=QUIET, prefill=(160.0,) * 5, watched=True)
    noisy = make_run(root, "b-hog", ended_at="2026-07-28T10:00:00.000Z", decode=(20.0, 20.1, 19.9, 20.05, 19.95),
                     prefill=(160.0,) * 5, watched=True, contended_rounds=(0, 1, 2, 3, 4))
    text = write_measured(noisy, PACK).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("- `default` ctx 1,024 × c1"))
    assert "Likely cause: contention in the new run (5/5 samples: others held 1.02 of 2 cores" in line


def test_a_steady_tip_has_no_stability_note(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    make_run(root, "a", ended_at="2026-07-27T10:00:00.000Z", decode=QUIET, prefill=(160.0,) * 5, watched=True)
    b = make_run(root, "b", ended_at="2026-07-28T10:00:00.000Z", decode=QUIET, prefill=(160.0,) * 5, watched=True)
    assert "## Stability" not in write_measured(b, PACK).read_text()


def test_a_smoke_suite_run_on_a_contended_host_is_labelled(tmp_path: Path) -> None:
    run = make_run(tmp_path / PACK.id, "busy-smoke", decode=QUIET, prefill=(160.0,) * 5, watched=True,
                   smoke_contended=True)
    row = next(ln for ln in write_measured(run, PACK).read_text().splitlines() if ln.startswith("| agent_smoke"))
    assert "**host contended during the suite (others held 1.02 of 2 cores (51%): python3 (pid 4242) 0.98 cores): " \
           "its duration is not a quiet figure**" in row


def test_a_smoke_suite_on_a_quiet_host_has_no_label(tmp_path: Path) -> None:
    run = make_run(tmp_path / PACK.id, "quiet-smoke", decode=QUIET, prefill=(160.0,) * 5, watched=True,
                   smoke_contended=False)
    row = next(ln for ln in write_measured(run, PACK).read_text().splitlines() if ln.startswith("| agent_smoke"))
    assert "contended" not in row


def test_candidate_decisions_use_claim_grade_runs_and_label_noisy_ones(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    make_run(root, "base-quiet", ended_at="2026-07-28T08:00:00.000Z", decode=QUIET, prefill=(160.0,) * 5,
             watched=True)
    make_run(root, "base-hog", ended_at="2026-07-28T09:00:00.000Z", decode=(9.0, 9.1, 8.9, 9.05, 8.95),
             prefill=(160.0,) * 5, watched=True, contended_rounds=(0, 1, 2, 3, 4))
    cand = make_run(root, "cand-hog", ended_at="2026-07-28T10:00:00.000Z", preset="spec-ngram",
                    decode=(20.0, 20.1, 19.9, 20.05, 19.95), prefill=(160.0,) * 5, watched=True,
                    contended_rounds=(0,), smoke=None)
    row = next(ln for ln in write_measured(cand, PACK).read_text().splitlines() if ln.startswith("| spec-ngram"))
    assert "measured `cand-hog` vs `base-quiet`" in row  # not against the newer, noisy baseline
    assert "**measured on noisy runs (cand-hog): not a claim**" in row


def test_the_html_report_labels_noisy_rows_and_states_the_move(tmp_path: Path) -> None:
    from servepack.report import write_report

    root = tmp_path / PACK.id
    make_run(root, "a-quiet", ended_at="2026-07-27T10:00:00.000Z", decode=QUIET, prefill=(160.0,) * 5, watched=True)
    make_run(root, "b-hog", ended_at="2026-07-28T10:00:00.000Z", decode=(20.0, 20.1, 19.9, 20.05, 19.95),
             prefill=(160.0,) * 5, watched=True, contended_rounds=(0, 1, 2, 3, 4))
    page = write_report([root]).read_text()
    assert "Not claim-grade: 1 setting(s)" in page
    assert "not claim-grade (noisy: ctx 256: 5/5 samples contended (others held 1.02 of 2 cores" in page
    assert "<h3>Stability</h3>" in page
    assert "20.00 in b-hog vs 36.00 in a-quiet (-44.4%" in page
    assert "Likely cause: contention in the new run (5/5 samples" in page


def test_the_html_report_of_steady_quiet_runs_has_no_noisy_or_stability_part(tmp_path: Path) -> None:
    from servepack.report import write_report

    root = tmp_path / PACK.id
    make_run(root, "a-quiet", ended_at="2026-07-27T10:00:00.000Z", decode=QUIET, prefill=(160.0,) * 5, watched=True)
    make_run(root, "b-quiet", ended_at="2026-07-28T10:00:00.000Z", decode=QUIET, prefill=(160.0,) * 5, watched=True)
    page = write_report([root]).read_text()
    assert "Not claim-grade" not in page and "Stability" not in page and "binds (tip of its kind)" in page


def _stability_line(text: str) -> str:
    return next(ln for ln in text.splitlines() if ln.startswith("- `default` ctx 1,024 × c1"))


def test_a_new_port_is_not_a_changed_command_line(tmp_path: Path) -> None:
    # Every launch picks a free port: two runs that differ only there have the same settings, and a move between
    # them is unexplained, not blamed on the command line (it was, at 13:42 this stop, on a real run).
    root = tmp_path / PACK.id
    base = ("/bin/llama-server", "--model", "/m.gguf", "--host", "127.0.0.1")
    make_run(root, "a-quiet", ended_at="2026-07-27T10:00:00.000Z", decode=QUIET, prefill=(160.0,) * 5, watched=True,
             server_argv=(*base, "--port", "46203", "--n-gpu-layers", "-1"))
    new = make_run(root, "b-slower", ended_at="2026-07-28T10:00:00.000Z", decode=(30.0, 30.1, 29.9, 30.05, 29.95),
                   prefill=(160.0,) * 5, watched=True, server_argv=(*base, "--port", "41567", "--n-gpu-layers", "-1"))
    line = _stability_line(write_measured(new, PACK).read_text())
    assert "Likely cause: no recorded fact explains it." in line and "command line" not in line


def test_a_changed_flag_is_named_with_both_values(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    base = ("/bin/llama-server", "--model", "/m.gguf", "--port", "1")
    make_run(root, "a-quiet", ended_at="2026-07-27T10:00:00.000Z", decode=QUIET, prefill=(160.0,) * 5, watched=True,
             server_argv=(*base, "--ctx-size", "4096", "--n-gpu-layers", "-1", "--jinja"))
    new = make_run(root, "b-changed", ended_at="2026-07-28T10:00:00.000Z", decode=(30.0, 30.1, 29.9, 30.05, 29.95),
                   prefill=(160.0,) * 5, watched=True, server_argv=(*base, "--ctx-size", "8192", "--n-gpu-layers", "0"))
    line = _stability_line(write_measured(new, PACK).read_text())
    assert ("Likely cause: server command line changed (--ctx-size 4096 → 8192; --jinja (set) → (absent); "
            "--n-gpu-layers -1 → 0).") in line
