"""MEASURED.md: rendered from the receipts of a pack's results history, never written by hand."""

from __future__ import annotations

from pathlib import Path

from servepack import __version__
from servepack.bench.sample import metric_label
from servepack.bench.summary import Cell
from servepack.packs.schema import Pack
from servepack.records.claims import HeadlineChoice, RunView, cell_stat, stat_name
from servepack.records.evidence import Drift, Evidence, SettingRow, evidence_for
from servepack.records.verify import MEASURED_NAME
from servepack.report.measured_bfcl import bfcl_counted, bfcl_lines
from servepack.report.measured_capacity import capacity_lines, energy_lines
from servepack.safepath import replace_bytes
from servepack.store import rfc3339, scrubbed_text, utc_now

GIB = 1 << 30
BINDS = "binds (tip of its kind)"
SHOWN_FLAGS = ("ctx-size", "n-gpu-layers", "flash-attn", "parallel", "spec-type", "spec-draft-n-max", "cache-reuse")


def _date(ts: str) -> str:
    return ts[:16].replace("T", " ") + " UTC"


def _num(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def host_line(run: RunView) -> str:
    r = run.receipt
    h, hw = r.host, r.hardware
    gpu = (", ".join(g.name for g in h.gpus) + f" · driver {h.gpu_driver} · CUDA {h.cuda_driver_version}"
           if h.gpus else f"no GPU ({h.nvml})")
    match = "matches the pack's target" if hw.target_match else (
        f"not the pack's target {hw.target_id}: {'; '.join(hw.failed_rules)}")
    return (f"Host: {h.cpu_model} · {h.cpu_cores_logical} cores · {h.ram_gib:.0f} GiB RAM · {gpu} · {h.os} · "
            f"kernel {h.kernel} · hardware id **{hw.attributed_id}** (detected {hw.detected_id}; {match})")


def engine_line(run: RunView, pack: Pack) -> str:
    e = run.receipt.engine
    pin = pack.engine.commit or f"{pack.engine.package}=={pack.engine.package_version}"
    if e is None:
        return f"Engine: {pack.engine.name} pin `{pin}` · not recorded"
    version = e.version_text.strip().splitlines()[0] if e.version_text.strip() else "no version text"
    build = f" · /props build {e.props.get('build_info')}" if e.props and e.props.get("build_info") else ""
    return (f"Engine: {pack.engine.name} `{version}`{build} · pin `{pin}` · pin match: "
            f"{'yes' if e.pin_match else 'no'} ({e.pin_reason}) · binary sha256 `{e.sha256[:12]}…`")


def weights_line(run: RunView, pack: Pack) -> str:
    m = run.receipt.model
    if m is None:
        return f"Weights: {pack.model.name} {pack.model.quant} · not recorded"
    match = {True: "yes", False: "NO", None: "no pin"}[m.pin_match]
    twin = " · random-weight shape twin: speed only" if m.random_weights else ""
    return (f"Weights: {pack.model.name} {pack.model.quant} @ `{m.sha256[:8]}…` · {m.size_bytes / 1e9:.2f} GB · "
            f"pin match: {match} · source {m.source_kind}{twin}")


def serve_line(run: RunView) -> str:
    s = run.receipt.server
    if s is None:
        return "Serve: not recorded"
    args = " ".join(s.argv[1:])
    ready = f" · healthy after {s.ready_s:.1f} s" if s.ready_s is not None else ""
    mem = run.memory_summary()
    if mem and mem.host_available_before_load_bytes and mem.host_available_after_load_bytes:
        ready += (f" · host available {mem.host_available_before_load_bytes / GIB:.1f} → "
                  f"{mem.host_available_after_load_bytes / GIB:.1f} GiB after load")
    return f"Serve: `{Path(s.argv[0]).name} {args}`{ready}"


def headline_block(choice: HeadlineChoice, pack: Pack) -> str:
    h = choice.headline
    what = (f"{metric_label(h.metric, h.source)} @ {h.gen_tokens} gen, "
            f"{h.context_tokens:,}-token prompt, preset `{h.preset}`")
    if choice.run is None or choice.stat is None:
        return f"**Headline:** none — {choice.why_none}. ({what})"
    st, r = choice.stat, choice.run.receipt
    ci = f", {st.interval_text()}" if st.n else ""
    cell = choice.cell
    quality = ""
    if not choice.quality_recorded:
        quality = " · measurement quality not recorded (host not watched, no interval target)"
    elif cell is not None and cell.contended is not None and cell.n_set_aside:
        quality = (f" · {cell.n_clean} clean samples ({cell.set_aside_text()}, replaced; in no figure), within "
                   f"the ±{pack.claims.interval_target_pct:g}% target")
    elif cell is not None and cell.contended is not None:
        quality = (f" · host quiet (0/{cell.n} samples contended), no stalls, within the ±"
                   f"{pack.claims.interval_target_pct:g}% target")
    claim = "claim-eligible" if r.claim.eligible else f"not claim-eligible: {'; '.join(r.claim.reasons)}"
    return (f"**Headline:** {what}: **{_num(st.median)}** (median of {st.n}{ci}) on **{choice.hardware_id}** · "
            f"run `{choice.run.path.name}` · {_date(r.ended_at)}{quality} · {claim}")


def noisy_lines(choice: HeadlineChoice) -> list[str]:
    """Newer runs the headline passed over because they were not claim-grade: labelled, with their figures."""
    out = []
    for run, reason in choice.noisy:
        cell = run.cells().get((choice.headline.context_tokens, 1, choice.headline.gen_tokens))
        figure = ""
        if cell is not None:
            st = cell_stat(cell, choice.headline.metric, choice.headline.source)
            figure = f" {_num(st.median)} (median of {st.n}, {st.interval_text()})"
        out.append(f"- Not the headline: `{run.path.name}` ({_date(run.when)}){figure} — {reason}")
    return out


def drift_lines(ev: Evidence) -> list[str]:
    if not ev.drift:
        return []
    out = ["## Stability", "",
           "Runs of one setting on the same pins and host that differ by more than the 95% interval:", ""]
    for d in ev.drift:
        out.append(_drift_line(d))
    return [*out, ""]


def _drift_line(d: Drift) -> str:
    preset, gen, conc = d.key
    return (f"- `{preset}` ctx {d.context_tokens:,} × c{conc} @ {gen} gen: {d.metric} **{_num(d.new_median)}** in "
            f"`{d.new.path.name}` vs {_num(d.previous_median)} in `{d.previous.path.name}` "
            f"({d.change_pct:+.1f}%; outside the {d.interval_of} run's 95% interval "
            f"{_num(d.interval[0])}–{_num(d.interval[1])}). Likely cause: "
            f"{'; '.join(d.causes)}.")


def _setting(run: RunView, cells: list[Cell]) -> str:
    flags = run.receipt.preset.flags if run.receipt.preset else {}
    bits = [f"{k} {v}" for k, v in flags.items() if k in SHOWN_FLAGS]
    return f"`{run.preset}` · " + ", ".join(bits) + f" · concurrency {cells[0].concurrency}"


def setting_row(row: SettingRow, pack: Pack) -> str:
    run, cells = row.run, row.cells
    newer = row.superseded_by.path.name if row.superseded_by else "?"
    status = f"tip {_date(run.when)}" if row.binds else (
        f"{_date(run.when)}; the tip is `{newer}`" if row.noisy and row.superseded_by else
        f"{_date(run.when)}; no claim-grade run of this setting" if row.noisy else
        f"historical ({_date(run.when)}; superseded by `{newer}`)")
    src = pack.claims.headline.source
    prefill = "; ".join(f"{c.context_tokens:,} prompt → {_num((c.ttft_ms.median or 0) / 1000, 3)} s"
                        if c.ttft_ms.median is not None else f"{c.context_tokens:,} prompt → —" for c in cells)
    decode = " · ".join(f"{_num(cell_stat(c, 'decode_tok_s', src).median)} ({c.context_tokens:,})" for c in cells)
    gen = cells[0].gen_tokens
    mem = run.memory_summary()
    rss = f"{mem.peak_server_rss_bytes / GIB:.2f} GiB peak" if mem and mem.peak_server_rss_bytes else "—"
    notes = [status, run.receipt.hardware.attributed_id, f"run `{run.path.name}`",
             f"{stat_name('decode_tok_s', src)} median", f"fresh {sum(c.n_fresh for c in cells)}/"
             f"{sum(c.n for c in cells)}"]
    if row.noise_floor:
        notes.insert(0, "**noise floor — shown, never a headline**")
    if run.receipt.preset and run.receipt.preset.role != "claim":
        notes.append(f"role {run.receipt.preset.role}")
    if run.receipt.status != "complete":
        notes.append(f"run {run.receipt.status}")
    if row.noisy:
        notes.insert(0, f"**{row.noisy} — shown, never binding, never a headline**")
    return f"| {_setting(run, cells)} | {prefill} | {decode} @ {gen} gen | {rss} | {' · '.join(notes)} |"


def setting_tables(ev: Evidence) -> list[str]:
    head = ["| Setting | TTFT (prompt → first token, client) | tg tok/s | server RSS | notes |",
            "|---|---|---|---|---|"]
    current = [setting_row(r, ev.pack) for r in ev.current_settings]
    older = [setting_row(r, ev.pack) for r in ev.historical_settings]
    noisy = [setting_row(r, ev.pack) for r in ev.noisy_settings]
    out = head + (current or ["| — | — | — | — | no claim-grade bench run in this history |"])
    if noisy:
        out += ["", "Noisy runs (contended host, stalled requests or an interval wider than the pack's "
                f"±{ev.pack.claims.interval_target_pct:g}% target; labelled, never binding):", "", *head, *noisy]
    if older:
        out += ["", "Historical only (older runs of the same setting; they never bind):", "", *head, *older]
    return out


def smoke_table(ev: Evidence) -> list[str]:
    if not ev.smoke:
        return ["No smoke suite in this history."]
    out = ["| Suite | quant | pass (strict) | pass (lenient) | n | duration | temperature | tip | runner | notes |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for row in ev.smoke:
        run, s = row.run, row.result
        passed, counted = bfcl_counted(s) or (s.strict_passed, "")
        pct = 100 * passed / s.n if s.n else 0.0
        kind = "executed in the sandbox" if s.executed else "one-response: tools validated, not executed"
        notes = [kind, f"`{run.path.name}/{row.file}`"]
        phase = run.contention.phases.get(f"smoke {s.suite}") if run.contention else None
        if phase is not None and phase.contended:
            notes.insert(0, f"**host contended during the suite ({phase.reason}): its duration is not a quiet "
                            "figure**")
        older = [f"{x.duration_s:.2f} s ({_date(r.when)})" for r, x in row.older]
        if older:
            notes.append(f"older runs {', '.join(older)} are historical only")
        out.append(f"| {s.suite} v{s.suite_version} | {ev.pack.model.quant} | "
                   f"**{passed}/{s.n} · {pct:.0f}%**{counted} | {s.lenient_passed}/{s.n} | {s.n} | "
                   f"**{s.duration_s:.2f} s** | {s.temperature:g} | {_date(run.when)} | `{s.runner_hash[:8]}…` | "
                   f"{' · '.join(notes)} |")
    return out


def candidate_rows(ev: Evidence) -> list[str]:
    if not ev.candidates:
        return ["No candidates declared by the pack."]
    out = ["| Candidate | preset | baseline | decision | reason |", "|---|---|---|---|---|"]
    for row in ev.candidates:
        c = row.candidate
        out.append(f"| {c.name} | `{c.preset}` | `{c.baseline_preset}` | **{row.decision}** | {row.reason} |")
    return out


def _receipt_role(path: Path, binding: frozenset[Path], bench_binds: set[Path], noisy: set[Path]) -> str:
    if path in noisy:
        return "bench noisy, never binding" + ("; its smoke suites bind" if path in binding else "")
    return BINDS if path in binding or path in bench_binds else "historical only"


def render_measured(ev: Evidence) -> str:
    """The whole document, rendered from the evidence view model."""
    runs, pack, tip, binding, choice = ev.runs, ev.pack, ev.tip, ev.binding, ev.headline
    noisy = {r.run.path for r in ev.noisy_settings}
    bench_binds = {r.run.path for r in ev.current_settings}
    lines = [
        f"# MEASURED — {pack.id}",
        "",
        f"Rendered by servepack {__version__} at {rfc3339(utc_now())} from {len(runs)} receipt(s); derived, not "
        "covered by any receipt. Edit nothing here: re-run, and `servepack verify` each results directory.",
        "",
        f"## Measured results ({tip.when[:10]} · {tip.receipt.hardware.attributed_id})",
        "",
        host_line(tip) + "  ",
        engine_line(tip, pack) + "  ",
        weights_line(tip, pack) + "  ",
        serve_line(tip),
        "",
        headline_block(choice, pack),
        *noisy_lines(choice),
        "",
        *setting_tables(ev),
        "",
        *energy_lines(ev),
        *drift_lines(ev),
        "Smoke suites — claims use temperature "
        f"{pack.claims.temperature:g}; **live tip durations bind**, older runs are historical only:",
        "",
        *smoke_table(ev),
        "",
        *bfcl_lines(ev),
        "## Candidates",
        "",
        *candidate_rows(ev),
        "",
        *capacity_lines(ev),
        "## Receipts",
        "",
        *[f"- `{r.path.name}` · {r.receipt.kind} · {r.receipt.status} · {_date(r.when)} · "
          f"{r.receipt.hardware.attributed_id} · "
          f"{_receipt_role(r.path, binding, bench_binds, noisy)}"
          for r in reversed(runs)],
        "",
        f"Raw (tip): {', '.join(f'`{name}`' for name in sorted(tip.receipt.files))}",
    ]
    return "\n".join(lines) + "\n"


def write_measured(run_dir: Path, pack: Pack) -> Path:
    """Render MEASURED.md into run_dir from this run and its sibling runs (the pack's history)."""
    text = render_measured(evidence_for(run_dir, pack))
    path = run_dir / MEASURED_NAME
    # Derived from receipts, so re-rendering may replace it; still atomic so a reader never sees half a file, and a
    # write the disk cannot take leaves the earlier MEASURED.md (if any) and no temp file. Private, as the run's
    # other results files are.
    return replace_bytes(path, scrubbed_text(text).encode(), mode=0o600)
