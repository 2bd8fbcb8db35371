"""Section 9: provenance and receipts, verified at render time."""

from __future__ import annotations

from servepack.errors import ServepackError
from servepack.records.claims import RunView
from servepack.records.verify import verify_run
from servepack.report.context import Ctx, when
from servepack.report.markup import Safe, esc, inline_md, note, table
from servepack.report.measured import engine_line, host_line, serve_line, weights_line


def _verify_text(run: RunView) -> tuple[str, bool]:
    try:
        rep = verify_run(run.path)
    except ServepackError as exc:
        return f"does not verify: {exc}", False
    if rep.ok:
        return f"ok: {rep.files_checked} files, {rep.figures_checked} figures", True
    return f"{len(rep.mismatches)} mismatch(es): {rep.mismatches[0].line()}", False


def section(ctx: Ctx) -> str:
    ev = ctx.ev
    tip = ctx.group.focus[-1]
    pack = ev.pack
    lines = [host_line(tip), engine_line(tip, pack), weights_line(tip, pack), serve_line(tip)]
    pins = [f"Pack: `{pack.id}` · file `{tip.receipt.pack.path}` · sha256 `{tip.receipt.pack.sha256[:12]}…`"
            + (" · shipped" if tip.receipt.pack.shipped else ""),
            f"Pins: model sha256 `{(pack.model.sha256 or 'none')[:16]}…` · engine "
            f"`{pack.engine.commit or f'{pack.engine.package}=={pack.engine.package_version}'}`"]
    out = ["<ul class='prov'>" + "".join(f"<li>{inline_md(x)}</li>" for x in pins + lines) + "</ul>"]
    for r in ctx.group.focus:
        if r.receipt.notes:
            out.append(note(f"notes of {r.path.name}: " + "; ".join(r.receipt.notes), "info"))
    body = []
    for r in reversed(ev.runs):
        text, ok = _verify_text(r)
        claim = "claim-eligible" if r.receipt.claim.eligible else "not eligible: " + "; ".join(r.receipt.claim.reasons)
        status = r.receipt.status + (f": {r.receipt.error}" if r.receipt.error else "")
        body.append([r.path.name, r.receipt.kind, r.preset or "—", status, when(r.when),
                     r.receipt.hardware.attributed_id,
                     "binds (tip of its kind)" if r.path in ev.binding else "historical only", claim,
                     Safe(f"<span class='{'ok' if ok else 'bad'}'>{esc(text)}</span>")])
    out.append(table(["run", "kind", "preset", "receipt status", "ended", "hardware", "binding", "claim",
                      "verify (at render time)"], body, caption="receipts, newest first"))
    return "".join(out)

