"""MEASURED.md: rendered from the receipts of a pack's results history, never written by hand."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from servepack import __version__
from servepack.bench.summary import Cell
from servepack.errors import ServepackError
from servepack.packs.schema import Candidate, Pack
from servepack.records.claims import (
    HeadlineChoice,
    RunView,
    cell_stat,
    history,
    is_noise_floor,
    select_headline,
    stat_name,
)
from servepack.store import rfc3339, utc_now
from servepack.records.verify import MEASURED_NAME

GIB = 1 << 30
BINDS = "binds (tip of its kind)"
METRIC_LABEL = {"decode_tok_s": "decode tok/s", "prefill_tok_s": "prefill tok/s", "ttft_ms": "TTFT ms"}
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
    what = (f"{METRIC_LABEL[h.metric]} ({'client' if h.metric == 'ttft_ms' else h.source}) @ {h.gen_tokens} gen, "
            f"{h.context_tokens:,}-token prompt, preset `{h.preset}`")
    if choice.run is None or choice.stat is None:
        return f"**Headline:** none — {choice.why_none}. ({what})"
    st, r = choice.stat, choice.run.receipt
    ci = f", 95% CI {_num(st.ci95_low)}–{_num(st.ci95_high)}" if st.ci95_low is not None else ""
    claim = "claim-eligible" if r.claim.eligible else f"not claim-eligible: {'; '.join(r.claim.reasons)}"
    return (f"**Headline:** {what}: **{_num(st.median)}** (median of {st.n}{ci}) on **{choice.hardware_id}** · "
            f"run `{choice.run.path.name}` · {_date(r.ended_at)} · {claim}")


def _setting(run: RunView, cells: list[Cell]) -> str:
    flags = run.receipt.preset.flags if run.receipt.preset else {}
    bits = [f"{k} {v}" for k, v in flags.items() if k in SHOWN_FLAGS]
    return f"`{run.preset}` · " + ", ".join(bits) + f" · concurrency {cells[0].concurrency}"


def setting_row(run: RunView, cells: list[Cell], pack: Pack, status: str) -> str:
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
    if any(is_noise_floor(c, pack.claims) for c in cells):
        notes.insert(0, "**noise floor — shown, never a headline**")
    if run.receipt.preset and run.receipt.preset.role != "claim":
        notes.append(f"role {run.receipt.preset.role}")
    if run.receipt.status != "complete":
        notes.append(f"run {run.receipt.status}")
    return f"| {_setting(run, cells)} | {prefill} | {decode} @ {gen} gen | {rss} | {' · '.join(notes)} |"


def _bench_groups(runs: list[RunView]) -> list[tuple[tuple[str | None, int, int], RunView, list[Cell]]]:
    out = []
    for run in runs:
        by_conc: dict[int, list[Cell]] = {}
        for c in (run.bench.cells if run.bench else []):
            by_conc.setdefault(c.concurrency, []).append(c)
        for conc, cells in sorted(by_conc.items()):
            out.append(((run.preset, cells[0].gen_tokens, conc), run, sorted(cells, key=lambda c: c.context_tokens)))
    return out


def setting_tables(runs: list[RunView], pack: Pack) -> list[str]:
    groups = _bench_groups(runs)
    tip: dict[object, RunView] = {}
    for key, run, _ in groups:
        tip[key] = run  # runs are oldest first, so the last one per key is the tip
    head = ["| Setting | prefill latency (TTFT) | tg tok/s | server RSS | notes |", "|---|---|---|---|---|"]
    current = [setting_row(run, cells, pack, f"tip {_date(run.when)}") for key, run, cells in reversed(groups)
               if tip[key] is run]
    older = [setting_row(run, cells, pack, f"historical ({_date(run.when)}; superseded by `{tip[key].path.name}`)")
             for key, run, cells in reversed(groups) if tip[key] is not run]
    out = head + (current or ["| — | — | — | — | no bench run in this history |"])
    if older:
        out += ["", "Historical only (older runs of the same setting; they never bind):", "", *head, *older]
    return out


def smoke_table(runs: list[RunView], pack: Pack) -> list[str]:
    rows: dict[str, list[tuple[RunView, str]]] = {}
    for run in runs:
        for name, suite in run.smoke:
            rows.setdefault(suite.suite, []).append((run, name))
    if not rows:
        return ["No smoke suite in this history."]
    out = ["| Suite | quant | pass (strict) | pass (lenient) | n | duration | temperature | tip | runner | notes |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for _, entries in sorted(rows.items()):
        run, fname = entries[-1]
        s = next(x for n, x in run.smoke if n == fname)
        pct = 100 * s.strict_passed / s.n if s.n else 0.0
        kind = "executed in the sandbox" if s.executed else "one-response: tools validated, not executed"
        notes = [kind, f"`{run.path.name}/{fname}`"]
        older = [f"{x.duration_s:.2f} s ({_date(r.when)})" for r, n in entries[:-1]
                 for nn, x in r.smoke if nn == n]
        if older:
            notes.append(f"older runs {', '.join(older)} are historical only")
        out.append(f"| {s.suite} v{s.suite_version} | {pack.model.quant} | **{s.strict_passed}/{s.n} · {pct:.0f}%** | "
                   f"{s.lenient_passed}/{s.n} | {s.n} | **{s.duration_s:.2f} s** | {s.temperature:g} | "
                   f"{_date(run.when)} | `{s.runner_hash[:8]}…` | {' · '.join(notes)} |")
    return out


def candidate_rows(runs: list[RunView], pack: Pack) -> list[str]:
    if not pack.candidates:
        return ["No candidates declared by the pack."]
    out = ["| Candidate | preset | baseline | decision | reason |", "|---|---|---|---|---|"]
    for c in pack.candidates:
        decision, reason = measured_decision(runs, pack, c)
        out.append(f"| {c.name} | `{c.preset}` | `{c.baseline_preset}` | **{decision}** | {reason} |")
    return out


def measured_decision(runs: list[RunView], pack: Pack, cand: Candidate) -> tuple[str, str]:
    """The compare decision of the newest candidate run against the newest baseline run, else the pack's."""
    from servepack.records.compare import compare_views

    def newest(preset: str) -> RunView | None:
        done = [r for r in runs if r.preset == preset and r.bench is not None and r.receipt.status == "complete"]
        return done[-1] if done else None

    base, new = newest(cand.baseline_preset), newest(cand.preset)
    declared = f"declared by the pack: {cand.reason or 'no reason given'}"
    if base is None or new is None:
        return cand.decision, f"{declared} (no measured pair in this history)"
    try:
        cmp = compare_views(base, new, pack)
    except ServepackError as exc:
        return cand.decision, f"{declared} (measured pair not comparable: {exc})"
    return cmp.decision, (f"measured `{new.path.name}` vs `{base.path.name}`: " + "; ".join(cmp.reasons[:2])
                          + (f" · pack declared {cand.decision}" if cand.decision != cmp.decision else ""))


def binding_runs(runs: list[RunView]) -> set[Path]:
    """Runs that are the tip of at least one kind (a bench setting or a smoke suite)."""
    tips: dict[object, RunView] = {}
    for key, run, _ in _bench_groups(runs):
        tips[("bench", key)] = run
    for run in runs:
        for _, suite in run.smoke:
            tips[("smoke", suite.suite)] = run
    return {r.path for r in tips.values()}


def render_measured(runs: list[RunView], pack: Pack) -> str:
    """The whole document; `runs` oldest first, the newest binds."""
    if not runs:
        raise ServepackError("no receipts to render MEASURED.md from")
    tip = runs[-1]
    binding = binding_runs(runs)
    choice = select_headline(runs, pack.claims)
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
        "",
        *setting_tables(runs, pack),
        "",
        "Smoke suites — claims use temperature "
        f"{pack.claims.temperature:g}; **live tip durations bind**, older runs are historical only:",
        "",
        *smoke_table(runs, pack),
        "",
        "## Candidates",
        "",
        *candidate_rows(runs, pack),
        "",
        "## Receipts",
        "",
        *[f"- `{r.path.name}` · {r.receipt.kind} · {r.receipt.status} · {_date(r.when)} · "
          f"{r.receipt.hardware.attributed_id} · {BINDS if r.path in binding else 'historical only'}"
          for r in reversed(runs)],
        "",
        f"Raw (tip): {', '.join(f'`{name}`' for name in sorted(tip.receipt.files))}",
    ]
    return "\n".join(lines) + "\n"


def write_measured(run_dir: Path, pack: Pack) -> Path:
    """Render MEASURED.md into run_dir from this run and its sibling runs (the pack's history)."""
    runs = [r for r in history(run_dir) if r.receipt.pack.id == pack.id or r.path == run_dir.resolve()]
    text = render_measured(runs, pack)
    path = run_dir / MEASURED_NAME
    # Derived from receipts, so re-rendering may replace it; still atomic so a reader never sees half a file.
    fd, tmp = tempfile.mkstemp(prefix=f".{MEASURED_NAME}.", dir=run_dir)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return path
