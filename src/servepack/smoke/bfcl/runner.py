"""Run BFCL categories through the smoke client and record them as a smoke SuiteResult.

Suite names: `bfcl` (every single-turn category) or `bfcl:CAT[,CAT…]` (a category, or the group `non_live`, `live`
or `multi_turn`), each with an optional size, `@N` or `@all` (`smoke run --full` adds `@all`). Multi-turn
categories are conversations executed in the sandbox (smoke.bfcl.multi_turn_drive); their entries whose backend
cannot run here are listed in the result's `skipped` with the reason.
The default is a deterministic subset of `DEFAULT_SUBSET` entries per category (smallest sha256 of the
id), so runs are comparable with each other; `@all` runs the whole category for comparison with the
published leaderboard. Every request carries `parallel_tool_calls: true`, OpenAI's default, which BFCL
assumes (llama-server allows one call per response without it). For leaderboard figures run
non-streamed only (`--mode nonstream`): with both modes a case passes only when both do.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from servepack.errors import UsageError
from servepack.smoke.attempts import attempt_rounds
from servepack.smoke.bfcl.checker import CHECKER_VERSION, check, decode
from servepack.smoke.bfcl.data import (
    CATEGORIES,
    DEFAULT_SUBSET,
    MT_CATEGORIES,
    BfclEntry,
    bfcl_version,
    canonical,
    category_of_id,
    files_sha256,
    load_category,
    openai_name,
    subset,
)
from servepack.smoke.client import ChatClient, body_message, body_problem, error_code_of
from servepack.smoke.codes import finding
from servepack.smoke.extract import calls_in_content
from servepack.smoke.result import CaseResult, SuiteResult, Verdict, case_result, check_run_options, run_cases
from servepack.smoke.runners import SuiteOptions
from servepack.smoke.scorer import transport_verdict
from servepack.store import ResultsDir

_MODES = ("nonstream", "stream")


GROUPS = {"non_live": [c for c in CATEGORIES if not c.startswith("live_")],
          "live": [c for c in CATEGORIES if c.startswith("live_")], "multi_turn": list(MT_CATEGORIES)}
KNOWN = (*CATEGORIES, *MT_CATEGORIES)


def _categories(name: str, text: str) -> list[str]:
    cats: list[str] = []
    for word in (w.strip() for w in text.split(",") if w.strip()):
        cats += GROUPS.get(word, [canonical(word)])
    unknown = [c for c in cats if c not in KNOWN]
    if unknown:
        raise UsageError(f"--suite {name}: no BFCL category {', '.join(unknown)}; known: "
                         f"{', '.join(KNOWN)} (or the groups {', '.join(GROUPS)})")
    return list(dict.fromkeys(cats)) or list(CATEGORIES)


def parse_suite(name: str) -> tuple[list[str], int | None, str]:
    """(categories, subset size or None for all, the result's file-safe suite name) of a `bfcl…` suite name."""
    body = name[len("bfcl"):] if name.startswith("bfcl") else None
    if body is None or (body and body[0] not in ":@"):
        raise UsageError(f"--suite {name}: a BFCL suite is bfcl, bfcl:CATEGORY[,CATEGORY] and optionally @N or @all")
    size_text = body.split("@", 1)[1] if "@" in body else None
    cats = _categories(name, body.split("@", 1)[0].lstrip(":"))
    size: int | None = DEFAULT_SUBSET
    if size_text is not None:
        if size_text == "all":
            size = None
        elif size_text.isdigit() and int(size_text) > 0:
            size = int(size_text)
        else:
            raise UsageError(f"--suite {name}: the size after @ is a positive number or 'all'")
    label = {tuple(CATEGORIES): "bfcl", MT_CATEGORIES: "bfcl-multi_turn"}.get(tuple(cats), "bfcl-" + "-".join(cats))
    label += "" if size == DEFAULT_SUBSET else ("-all" if size is None else f"-n{size}")
    return cats, size, label


def is_suite_name(name: str) -> bool:
    """A `--suite` value that names BFCL categories."""
    return name == "bfcl" or name.startswith(("bfcl:", "bfcl@"))


def full_suite(name: str) -> str:
    """`--full`: a BFCL suite name asking for every entry (`@all`); other suites are left as they are."""
    if not is_suite_name(name):
        return name
    return name.split("@", 1)[0] + "@all"


def select_entries(categories: list[str], size: int | None, case_ids: Sequence[str] | None) -> list[BfclEntry]:
    by_category = {c: load_category(c) for c in categories}
    if not case_ids:
        return [e for c in categories for e in subset(by_category[c], size)]
    by_id = {e.id: e for entries in by_category.values() for e in entries}
    unknown = [i for i in case_ids if i not in by_id]
    if unknown:
        raise UsageError(f"BFCL {', '.join(categories)}: no entry {', '.join(unknown)}; check --case ids")
    return [by_id[i] for i in case_ids]


def build_request(entry: BfclEntry, model: str, *, temperature: float, max_tokens: int) -> dict[str, Any]:
    return {"model": model, "messages": entry.messages, "tools": entry.tools, "temperature": temperature,
            "max_tokens": max_tokens, "parallel_tool_calls": True}


def _lenient_calls(message: dict[str, Any]) -> list[dict[str, Any]] | None:
    """What a forgiving runtime would run: native calls with object or empty arguments, else calls in content."""
    raw: list[Any] = [c.get("function") for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    if not raw and isinstance(message.get("content"), str):
        raw = calls_in_content(message["content"])
    out = []
    for fn in raw:
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return None
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                return None
        if not isinstance(args, dict):
            return None
        out.append({fn["name"]: args})
    return out or None


def score_entry(entry: BfclEntry, message: dict[str, Any]) -> Verdict:
    """BFCL's verdict (strict) and the same rules on leniently read calls (lenient; irrelevance: as strict)."""
    problem = check(entry, decode(message))
    if problem is None:
        return Verdict(strict_pass=True, lenient_pass=True)
    lenient_ok = entry.category != "irrelevance" and check(entry, _lenient_calls(message)) is None
    return Verdict(strict_pass=False, lenient_pass=lenient_ok,
                   findings=[finding(problem[0], problem[1], lenient_ok=lenient_ok)])


def lookup_entry(entry_id: str) -> Any:
    """One entry of the installed data by its id (`simple_python_0`, `live_simple_0-0-0`, `multi_turn_base_0`: a
    MultiTurnEntry); UsageError otherwise, or when the entry cannot run here (why)."""
    category = category_of_id(entry_id)
    if category in MT_CATEGORIES:
        from servepack.smoke.bfcl import multi_turn

        found, skipped = multi_turn.select([category], None, [entry_id])
        if skipped:
            raise UsageError(f"--case bfcl/{entry_id}: cannot be run here: {skipped[entry_id]}")
        return found[0]
    if category not in CATEGORIES:
        raise UsageError(f"--case bfcl/{entry_id}: no BFCL category {category!r} in that id; ids look like "
                         f"simple_python_0, live_simple_0-0-0 or multi_turn_base_0 (categories: {', '.join(KNOWN)})")
    return select_entries([category], None, [entry_id])[0]


def score_recorded_entry(entry: Any, recorded: dict[str, Any]) -> Verdict:
    """Offline scoring that agrees with a live BFCL run: a recorded attempt (its transport error, if any, is the
    verdict), a chat-completion body (one the client would refuse is a transport failure), one choice, or a bare
    assistant message; for a multi-turn entry, an attempt or its response (`{"turns": [[{"message": …}]]}`),
    replayed in the sandbox."""
    if "response" in recorded:
        error = recorded.get("error")
        if isinstance(error, str) and error:
            return transport_verdict(error_code_of(error), error)
        if not isinstance(recorded["response"], dict):
            return transport_verdict("TRANSPORT_BAD_RESPONSE", "the attempt recorded no response body")
        recorded = recorded["response"]
    if not isinstance(entry, BfclEntry):
        from servepack.smoke.bfcl.multi_turn_drive import score_response

        return score_response(entry, recorded)
    if "choices" in recorded or "error" in recorded:
        problem = body_problem(recorded)
        if problem:
            return transport_verdict(*problem)
        return score_entry(entry, body_message(recorded)[0])
    if isinstance(recorded.get("message"), dict):
        return score_entry(entry, recorded["message"])
    return score_entry(entry, recorded)


def run_entry(client: ChatClient, entry: BfclEntry, model: str, *, temperature: float, max_tokens: int,
              repeat: int, modes: Sequence[str]) -> CaseResult:
    request = build_request(entry, model, temperature=temperature, max_tokens=max_tokens)
    attempts = attempt_rounds(client, request, repeat=repeat, modes=modes, decide=decode,
                              score=lambda e: score_entry(entry, e.message))
    expected = [openai_name(next(iter(a))) for a in entry.ground_truth] or ["no call"]
    return case_result(entry.id, entry.category, f"BFCL {entry.category} (AST rules): expects {', '.join(expected)}",
                       attempts)


def runner_digest(categories: list[str]) -> str:
    """sha256 over the categories' data files and the checker version(s): what produced the verdicts."""
    single = [c for c in categories if c not in MT_CATEGORIES]
    text = f"{files_sha256(single)}\0bfcl-ast {CHECKER_VERSION}"
    if len(single) < len(categories):
        from servepack.smoke.bfcl.multi_turn import files_sha256 as mt_sha256
        from servepack.smoke.bfcl.multi_turn_check import MT_CHECKER_VERSION

        text += f"\0{mt_sha256([c for c in categories if c in MT_CATEGORIES])}\0bfcl-multi-turn {MT_CHECKER_VERSION}"
    return hashlib.sha256(text.encode()).hexdigest()


def scorer_version(categories: list[str]) -> str:
    version = f"bfcl-ast {CHECKER_VERSION}"
    if any(c in MT_CATEGORIES for c in categories):
        from servepack.smoke.bfcl.multi_turn_check import MT_CHECKER_VERSION

        version += f"; bfcl-multi-turn {MT_CHECKER_VERSION}"
    return version


def suite_entries(suite: str, case_ids: Sequence[str] | None = None) -> tuple[list[Any], dict[str, str]]:
    """The entries a `bfcl…` suite runs (single-turn `BfclEntry`s, then multi-turn entries) and the multi-turn ones
    skipped with why; UsageError for an unknown category or entry, and for multi-turn without a sandbox. Called before
    any server starts (`pipeline.run.check_suites`) and again by the run."""
    categories, size, _ = parse_suite(suite)
    single = [c for c in categories if c not in MT_CATEGORIES]
    multi = [c for c in categories if c in MT_CATEGORIES]
    ids_single = [i for i in case_ids if category_of_id(i) not in MT_CATEGORIES] if case_ids else None
    ids_multi = [i for i in case_ids if category_of_id(i) in MT_CATEGORIES] if case_ids else None
    entries: list[Any] = select_entries(single, size, ids_single) if ids_single or (single and not case_ids) else []
    skipped: dict[str, str] = {}
    if ids_multi and not multi:
        raise UsageError(f"--case {', '.join(ids_multi)}: multi-turn entries are not in --suite {suite}; run them "
                         "with --suite bfcl:multi_turn (or the entry's category)")
    if multi or ids_multi:
        from servepack.smoke import sandbox
        from servepack.smoke.bfcl import multi_turn

        sandbox.require()  # executed calls without real isolation: refused before the first entry
        found, skipped = multi_turn.select(multi, size, ids_multi)
        entries += found
    return entries, skipped


def run_bfcl_suite(base_url: str, model: str, suite: str, results: ResultsDir | None,
                   options: SuiteOptions) -> SuiteResult:
    """Run a `bfcl…` suite (see the module doc) with `options` and return (and, with `results`, write) its
    SuiteResult."""
    temperature, max_tokens, repeat, modes = options.temperature, options.max_tokens, options.repeat, options.modes
    check_run_options(repeat, modes, _MODES)
    categories, _, label = parse_suite(suite)
    multi = [c for c in categories if c in MT_CATEGORIES]
    entries, skipped = suite_entries(suite, options.case_ids)

    def run_one(e: Any) -> CaseResult:
        if isinstance(e, BfclEntry):
            return run_entry(client, e, model, temperature=temperature, max_tokens=max_tokens, repeat=repeat,
                             modes=modes)
        from servepack.smoke.bfcl import multi_turn_drive

        return multi_turn_drive.run_entry(client, e, model, temperature=temperature, max_tokens=max_tokens,
                                          repeat=repeat, modes=modes)

    with ChatClient(base_url) as client:
        return run_cases(
            label, entries, run_one, results, options.progress, suite_version=f"bfcl-eval {bfcl_version()} (BFCL v4)",
            executed=bool(multi), base_url=base_url, model=model, temperature=temperature, repeat=repeat,
            runner_hash=runner_digest(categories), scorer_version=scorer_version(categories), skipped=skipped,
        )
