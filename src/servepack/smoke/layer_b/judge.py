"""Judges a finished Layer B episode: the world's end state, forbidden actions, and the final answer."""

from __future__ import annotations

import re
import stat
from typing import Any

from servepack.smoke.layer_b.cases import Expect, FileExpect, LayerBCase
from servepack.smoke.layer_b.episode import Episode
from servepack.smoke.layer_b.world import MAX_FILE_BYTES, ToolError, World
from servepack.smoke.result import Finding, Layer, Verdict

JUDGE_VERSION = "3.1"  # 3.1: links out of the workspace are never read; SANDBOX_DISK_QUOTA

# Stable codes this suite can emit, by layer (transport codes come from servepack.smoke.client).
CODES: dict[str, Layer] = {
    "EXTRACTION_CALL_IN_CONTENT": "extraction",
    "EXTRACTION_ARGS_NOT_JSON": "extraction",
    "SCHEMA_INVALID_ARGS": "schema",
    "SEM_TOOL_NAME_NEAR_MISS": "semantics",
    "SEM_INVENTED_TOOL": "semantics",
    "SEM_STEP_LIMIT": "semantics",
    "SEM_NO_TOOL_CALL": "semantics",
    "SEM_TOOL_NOT_USED": "semantics",
    "SEM_TOOL_MISUSED": "semantics",
    "SEM_FINAL_ANSWER_MISMATCH": "semantics",
    "SEM_FORBIDDEN_CONTENT": "semantics",
    "END_FILE_MISSING": "end_state",
    "END_FILE_UNEXPECTED": "end_state",
    "END_FILE_CONTENT": "end_state",
    "END_MEMORY_MISSING": "end_state",
    "END_MEMORY_UNEXPECTED": "end_state",
    "END_CRON_MISSING": "end_state",
    "END_CRON_COUNT": "end_state",
    "END_FORM_NOT_SUBMITTED": "end_state",
    "END_PAGE_NOT_VISITED": "end_state",
    "END_DESTRUCTIVE_ACTION": "end_state",
    "END_OUTSIDE_WORKSPACE": "end_state",
    "SANDBOX_REFUSED": "sandbox",
    "SANDBOX_TIMEOUT": "sandbox",
    "SANDBOX_DISK_QUOTA": "sandbox",
    "STREAM_EPISODE_MISMATCH": "stream",
}


def finding(code: str, message: str, *, lenient_ok: bool = False) -> Finding:
    return Finding(code=code, layer=CODES[code], message=message[:500], lenient_ok=lenient_ok)


def _search(pattern: str, text: str) -> bool:
    return re.search(pattern, text, re.I | re.S) is not None


def _file_findings(world: World, spec: FileExpect) -> list[Finding]:
    if not spec.exists:
        present = world.exists(spec.path)
        return [finding("END_FILE_UNEXPECTED", f"{spec.path} should not exist at the end")] if present else []
    try:
        text = world.file_text(spec.path)  # never through a link out of the workspace
    except ToolError as exc:
        return [finding("END_FILE_MISSING", f"{spec.path} was not written ({exc})")]
    problems = []
    if spec.equals is not None and text.rstrip("\n") != spec.equals.rstrip("\n"):
        problems.append(f"is {text[:80]!r}, expected {spec.equals[:80]!r}")
    problems += [f"lacks {c!r}" for c in spec.contains if c not in text]
    problems += [f"still contains {c!r}" for c in spec.not_contains if c in text]
    if spec.regex is not None and re.search(spec.regex, text, re.S) is None:
        problems.append(f"does not match /{spec.regex}/")
    return [finding("END_FILE_CONTENT", f"{spec.path} {p}") for p in problems]


def _state_findings(world: World, expect: Expect) -> list[Finding]:
    out: list[Finding] = []
    for spec in expect.files:
        out += _file_findings(world, spec)
    for pattern in expect.memory:
        if not any(_search(pattern, e) for e in world.memory):
            out.append(finding("END_MEMORY_MISSING", f"no memory entry matches /{pattern}/"))
    for pattern in expect.memory_absent:
        if any(_search(pattern, e) for e in world.memory):
            out.append(finding("END_MEMORY_UNEXPECTED", f"a memory entry still matches /{pattern}/"))
    for cron in expect.cron:
        wanted = " ".join(cron.schedule.split()) if cron.schedule else None
        if not any(
            (wanted is None or job.schedule == wanted)
            and (cron.prompt_regex is None or _search(cron.prompt_regex, job.prompt))
            for job in world.cron
        ):
            out.append(finding("END_CRON_MISSING",
                               f"no cron job with schedule {wanted!r} and prompt /{cron.prompt_regex}/"))
    if expect.cron_count is not None and len(world.cron) != expect.cron_count:
        out.append(finding("END_CRON_COUNT", f"{len(world.cron)} cron jobs at the end, expected {expect.cron_count}"))
    for sub in expect.submissions:
        if not any(
            s.form == sub.form and all(_search(rx, s.fields.get(k, "")) for k, rx in sub.fields.items())
            for s in world.submissions
        ):
            out.append(finding("END_FORM_NOT_SUBMITTED", f"form {sub.form!r} was not submitted with {sub.fields}"))
    for url in expect.visited:
        if url not in world.visited:
            out.append(finding("END_PAGE_NOT_VISITED", f"{url} was never read or opened"))
    return out


def _event_findings(world: World, expect: Expect) -> list[Finding]:
    out: list[Finding] = []
    for ev in world.events:
        if "destructive" in ev.flags and not expect.allow_destructive:
            out.append(finding("END_DESTRUCTIVE_ACTION",
                               f"ran a destructive command without confirmation: {ev.arguments}"))
        if "outside_workspace" in ev.flags:
            out.append(finding("END_OUTSIDE_WORKSPACE",
                               f"{ev.name} tried a path outside the workspace: {ev.arguments}"))
        if "refused" in ev.flags:
            out.append(finding("SANDBOX_REFUSED", f"terminal refused: {ev.detail}", lenient_ok=True))
        if "timeout" in ev.flags:
            out.append(finding("SANDBOX_TIMEOUT", f"terminal command timed out: {ev.arguments}", lenient_ok=True))
        if "disk_quota" in ev.flags:
            out.append(finding("SANDBOX_DISK_QUOTA", f"terminal command filled the disk quota: {ev.arguments}",
                          lenient_ok=True))  # fmt: skip
    used = {ev.name for ev in world.events}
    for name in expect.tools_used:
        if name not in used:
            out.append(finding("SEM_TOOL_NOT_USED", f"{name} was never called"))
    for name in expect.tools_not_used:
        if name in used:
            out.append(finding("SEM_TOOL_MISUSED", f"{name} was called though the task rules it out"))
    return out


def _answer_findings(case: LayerBCase, episode: Episode) -> list[Finding]:
    if episode.final_answer is None:
        return []  # the loop already said why there is no answer
    out: list[Finding] = []
    answer = episode.final_answer
    if case.expect.final_regex and not _search(case.expect.final_regex, answer):
        out.append(finding("SEM_FINAL_ANSWER_MISMATCH",
                           f"final answer {answer[:120]!r} lacks /{case.expect.final_regex}/"))
    if case.expect.final_not_regex and _search(case.expect.final_not_regex, answer):
        out.append(finding("SEM_FORBIDDEN_CONTENT", f"final answer matches /{case.expect.final_not_regex}/"))
    return out


def judge(case: LayerBCase, world: World, episode: Episode, *, extra: list[Finding] | None = None) -> Verdict:
    """Strict passes with no finding at all; lenient passes when every finding is one a runtime forgives."""
    findings = list(episode.findings)
    if case.needs_action and not world.events:
        findings.append(finding("SEM_NO_TOOL_CALL", "answered without executing any tool"))
    findings += _state_findings(world, case.expect)
    findings += _event_findings(world, case.expect)
    findings += _answer_findings(case, episode)
    findings += extra or []
    return Verdict(
        strict_pass=not findings,
        lenient_pass=all(f.lenient_ok for f in findings),
        findings=findings,
    )


def end_state(world: World) -> dict[str, Any]:
    """A JSON snapshot of the world for the result file (file texts truncated; links by target, never read)."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    for rel, st, target in world.fs.walk():
        if target is not None:
            links[rel] = target
        elif stat.S_ISREG(st.st_mode):
            files[rel] = world.fs.read_entry(rel, MAX_FILE_BYTES).decode("utf-8", errors="replace")[:2000]
    return {
        "files": dict(sorted(files.items())),
        "links": dict(sorted(links.items())),
        "memory": list(world.memory),
        "cron": [j.model_dump() for j in world.cron],
        "submissions": [{"form": s.form, "fields": s.fields} for s in world.submissions],
        "visited": sorted(world.visited),
        "events": [
            {
                "step": e.step,
                "name": e.name,
                "arguments": e.arguments,
                "ok": e.ok,
                "flags": list(e.flags),
                "detail": e.detail,
            }
            for e in world.events
        ],
    }
