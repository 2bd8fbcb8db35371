"""Section 6: smoke suites: scores per category, every case, the failing ones in full."""

from __future__ import annotations

import json

from servepack.records.claims import RunView
from servepack.report import plots
from servepack.report.bfcl import bfcl_table
from servepack.report.context import Ctx, ci_text, figure
from servepack.report.markup import esc, note, pretty_json, table
from servepack.report.measured_bfcl import bfcl_counted
from servepack.smoke.result import SuiteResult, wilson95

MAX_JSON_CHARS = 6000  # per request or response of a failing smoke case
TOOLS_SHOWN_CHARS = 600
MAX_FAILING_SHOWN = 60


def _suites(ctx: Ctx) -> list[tuple[RunView, str, SuiteResult, list[tuple[RunView, SuiteResult]]]]:
    if ctx.group.single_run:
        return [(run, name, s, []) for run in ctx.group.focus for name, s in run.smoke]
    return [(row.run, row.file, row.result, row.older) for row in ctx.ev.smoke]


def _shown_request(req: dict[str, object], fname: str) -> dict[str, object]:
    """The request as sent, but long tool schemas (the same in every case of a suite) by name only."""
    tools = req.get("tools")
    if not isinstance(tools, list) or len(json.dumps(tools, default=str)) <= TOOLS_SHOWN_CHARS:
        return req
    names = [str(((t.get("function") or {}) if isinstance(t, dict) else {}).get("name", "?")) for t in tools]
    return {**req, "tools": [f"{n} (schema in {fname})" for n in names]}


def _attempt_html(a: object, fname: str) -> str:
    from servepack.smoke.result import Attempt

    assert isinstance(a, Attempt)
    findings = "".join(f"<li><code>{esc(f.code)}</code> ({esc(f.layer)}"
                       f"{', lenient ok' if f.lenient_ok else ''}): {esc(f.message)}</li>" for f in a.verdict.findings)
    blocks = []
    for what, doc in (("request", _shown_request(a.request, fname)), ("response", a.response)):
        text, cut = pretty_json(doc, MAX_JSON_CHARS)
        tail = f"\n… cut at {MAX_JSON_CHARS:,} characters; the whole record is in the suite's JSON" if cut else ""
        blocks.append(f"<h5>{what}</h5><pre>{esc(text + tail)}</pre>")
    err = f"<p class='note error'>error: {esc(a.error)}</p>" if a.error else ""
    verdict = ("strict pass" if a.verdict.strict_pass else "lenient pass" if a.verdict.lenient_pass else "fail")
    return (f"<div class='attempt'><h4>{esc(a.mode)} · repeat {a.repeat_index} · {esc(verdict)} · "
            f"{a.duration_s:.2f} s</h4>{err}<ul>{findings}</ul>{''.join(blocks)}</div>")


def section(ctx: Ctx) -> str:
    suites = _suites(ctx)
    if not suites:
        skipped = [n for r in ctx.group.focus for n in r.receipt.notes if "smoke" in n.lower()]
        return note("no smoke suite in " + ("this run" if ctx.group.single_run else "these runs")
                    + (f": {'; '.join(skipped)}" if skipped else ""))
    parts = []
    for run, fname, s, older in suites:
        sid = ctx.id("smoke", s.suite, run.path.name)
        kind = "executed in the sandbox" if s.executed else "one-response: tools validated, not executed"
        counted = bfcl_counted(s)
        strict = f"{counted[0]}/{s.n} non-streamed" if counted else f"{s.strict_passed}/{s.n}"
        parts.append(f"<h4 id='{sid}'>{esc(s.suite)} v{esc(s.suite_version)} · strict {esc(strict)} · "
                     f"lenient {s.lenient_passed}/{s.n} · {s.duration_s:.2f} s</h4>")
        parts.append(f"<p class='sub'>{esc(kind)} · temperature {s.temperature:g} · repeat {s.repeat} · "
                     f"<code>{esc(run.path.name)}/{esc(fname)}</code> · runner <code>{esc(s.runner_hash[:12])}…</code>"
                     "</p>")
        parts.append(bfcl_table(s))
        groups, cat_rows = [], []
        for cat, score in sorted(s.categories.items()):
            lo, hi = score.pass_k_wilson95 or wilson95(score.strict_passed, score.n)
            llo, lhi = wilson95(score.lenient_passed, score.n)
            groups.append((cat, [
                plots.Bar("strict", 100 * score.strict_passed / score.n if score.n else 0, 100 * lo, 100 * hi,
                          tip=f"{cat}: strict {score.strict_passed}/{score.n}",
                          text=f"{score.strict_passed}/{score.n}"),
                plots.Bar("lenient", 100 * score.lenient_passed / score.n if score.n else 0, 100 * llo, 100 * lhi,
                          tip=f"{cat}: lenient {score.lenient_passed}/{score.n}",
                          text=f"{score.lenient_passed}/{score.n}"),
            ]))
            cat_rows.append([cat, score.n, f"{score.strict_passed} ({ci_text(100 * lo, 100 * hi, 0)} %)",
                             f"{score.lenient_passed} ({ci_text(100 * llo, 100 * lhi, 0)} %)",
                             "—" if score.flake_rate is None else f"{score.flake_rate:.0%}"])
        if groups:
            svg = plots.grouped_hbars(groups, xlabel="cases passed (%)", name=sid, title=f"smoke {s.suite}",
                                      xmax=118, styles={"strict": 0, "lenient": 5})
            parts.append(figure(svg, "Share of cases passed per category, strict and lenient, with the Wilson 95% "
                                      "interval."))
        parts.append(table(["category", "n", "strict passed (Wilson 95%)", "lenient passed (Wilson 95%)", "flake"],
                           cat_rows, numeric=(1,)))
        if s.failure_codes:
            codes = sorted(s.failure_codes.items(), key=lambda kv: -kv[1])
            parts.append(table(["finding code", "cases"], codes, numeric=(1,), caption="verdict codes"))
        case_rows = [[c.case_id, c.category, "pass" if c.strict_pass else "FAIL",
                      "pass" if c.lenient_pass else "FAIL", " ".join(c.codes) or "—"] for c in s.cases]
        parts.append(f"<details><summary>All {len(s.cases)} cases</summary>"
                     + table(["case", "category", "strict", "lenient", "codes"], case_rows) + "</details>")
        failing = [c for c in s.cases if not c.strict_pass]
        for c in failing[:MAX_FAILING_SHOWN]:
            parts.append(f"<details class='case'><summary><span class='bad'>FAIL</span> <code>{esc(c.case_id)}</code> "
                         f"· {esc(c.category)} · {esc(' '.join(c.codes) or 'no code')}"
                         f"{' · lenient pass' if c.lenient_pass else ''}</summary>"
                         f"<p>{esc(c.rationale)}</p>{''.join(_attempt_html(a, fname) for a in c.attempts)}</details>")
        if len(failing) > MAX_FAILING_SHOWN:
            parts.append(note(f"{len(failing) - MAX_FAILING_SHOWN} more failing case(s) are in {fname}", "info"))
        if older:
            parts.append(note("older runs of this suite (historical only): " + ", ".join(
                f"{r.path.name} {x.strict_passed}/{x.n} strict, {x.duration_s:.2f} s" for r, x in older), "info"))
    return "".join(parts)

