"""Scoring offline what a run recorded, by the rules the run used: one response against one case, or every attempt
of every suite result in a results folder again (after a rule fix, say), each case's verdict set beside the
recorded one.

A case is a shipped case (`SUITE/CASE_ID`), a case file, or a BFCL entry (`bfcl/ENTRY_ID`, from the installed
bfcl-eval data). Re-scoring a folder applies each attempt's verdict as the live run would (a recorded transport
error is the verdict; else the scorer), then the stream comparison of each round, then the tally. Executed suites
(layer_b) are left out, with the reason: their verdicts come from running the episode. BFCL multi-turn
conversations are the exception: their recorded calls are replayed in the sandbox, as the live run judged them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servepack.errors import UsageError
from servepack.safepath import read_bounded
from servepack.smoke.attempts import Decide, flag_stream_mismatch
from servepack.smoke.client import body_message, error_code_of
from servepack.smoke.result import Attempt, CaseResult, SuiteResult, Verdict, case_result
from servepack.smoke.scorer import score_message, score_recorded, transport_verdict

MAX_RESULT_BYTES = 1 << 30
_HINT = "give the --out folder of a smoke run (it holds <suite>.json)"
Judge = Callable[[str, dict[str, Any]], Verdict]  # (case id, recorded attempt's response) → verdict


def is_bfcl(suite: str) -> bool:
    return suite == "bfcl" or suite.startswith(("bfcl:", "bfcl@", "bfcl-"))


def case_judge(case_ref: str) -> tuple[str, Callable[[dict[str, Any]], Verdict]]:
    """(case id, the judge of one recorded response) for a case reference (see the module doc)."""
    if case_ref.startswith("bfcl/"):
        from servepack.smoke.bfcl import lookup_entry, score_recorded_entry  # reads the wheel's data; only then

        entry = lookup_entry(case_ref[len("bfcl/"):])
        return entry.id, lambda response: score_recorded_entry(entry, response)
    from servepack.smoke.cases import load_case_ref

    case = load_case_ref(case_ref)
    return case.id, lambda response: score_recorded(case, response)


@dataclass
class Rescored:
    """One suite result of a folder: as recorded, as scored again (None when it cannot be), and why not."""

    file: Path
    recorded: SuiteResult
    rescored: SuiteResult | None = None
    skipped: str | None = None
    changed: list[dict[str, Any]] = field(default_factory=list)


def read_suite_results(folder: Path) -> list[tuple[Path, SuiteResult]]:
    """Every `<suite>.json` smoke result in a folder, in name order; UsageError when there is none."""
    if not folder.is_dir():
        raise UsageError(f"{folder}: not a folder; {_HINT}")
    found = []
    for path in sorted(folder.glob("*.json")):
        raw = read_bounded(path, MAX_RESULT_BYTES, _HINT)
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            continue
        if not isinstance(doc, dict) or doc.get("schema_version") != "servepack.smoke/v1":
            continue
        try:
            found.append((path, SuiteResult.model_validate(doc)))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise UsageError(f"{path}: not a smoke result this version reads ({where}: {first['msg']}); "
                             f"{_HINT}") from None
    if not found:
        raise UsageError(f"{folder}: holds no smoke result; {_HINT}")
    return found


def rescore_folder(folder: Path) -> list[Rescored]:
    """Every suite result of a folder scored again (see the module doc)."""
    return [rescore(path, result) for path, result in read_suite_results(folder)]


def rescore(path: Path, recorded: SuiteResult) -> Rescored:
    if recorded.executed and not is_bfcl(recorded.suite):
        return Rescored(path, recorded, skipped="executed episodes (layer_b) are judged by running them, not offline")
    try:
        rules = _bfcl_rules(recorded) if is_bfcl(recorded.suite) else _suite_rules(recorded)
    except UsageError as exc:
        return Rescored(path, recorded, skipped=f"its cases cannot be loaded here: {exc}")
    cases = [_rescore_case(c, rules.judge, rules.decide, rules.flag) for c in recorded.cases]
    header = recorded.model_dump(include={"suite", "suite_version", "executed", "base_url", "model", "temperature",
                                          "started_at", "duration_s", "skipped"})
    again = SuiteResult.tally(cases=cases, repeat=recorded.repeat, scorer_version=rules.version,
                              runner_hash=rules.runner_hash, **header)
    changed = [{"case_id": new.case_id, "recorded": {"strict_pass": old.strict_pass, "codes": old.codes},
                "rescored": {"strict_pass": new.strict_pass, "codes": new.codes}}
               for old, new in zip(recorded.cases, cases, strict=True)
               if (old.strict_pass, old.lenient_pass, old.codes) != (new.strict_pass, new.lenient_pass, new.codes)]
    return Rescored(path, recorded, again, changed=changed)


def _rescore_case(case: CaseResult, judge: Judge, decide: Decide,
                  flag: Callable[[list[Attempt]], bool] | None = None) -> CaseResult:
    attempts = [_rescore_attempt(case.case_id, a, judge) for a in case.attempts]
    for r in sorted({a.repeat_index for a in attempts}):
        round_ = [a for a in attempts if a.repeat_index == r]
        if flag is None or not flag(round_):
            flag_stream_mismatch(round_, decide)
    return case_result(case.case_id, case.category, case.rationale, attempts)


def _rescore_attempt(case_id: str, attempt: Attempt, judge: Judge) -> Attempt:
    if attempt.error:
        verdict = transport_verdict(error_code_of(attempt.error), attempt.error)
    else:
        verdict = judge(case_id, attempt.response or {})
    return attempt.model_copy(update={"verdict": verdict})


@dataclass(frozen=True)
class _Rules:
    judge: Judge
    decide: Decide
    version: str  # the scorer version the verdicts now come from
    runner_hash: str  # over the case files and that version, as a run computes it
    flag: Callable[[list[Attempt]], bool] | None = None  # a round's own stream comparison (True: it was done)


def _bfcl_rules(recorded: SuiteResult) -> _Rules:
    from servepack.smoke.bfcl.checker import decode
    from servepack.smoke.bfcl.data import MT_CATEGORIES, category_of_id
    from servepack.smoke.bfcl.runner import runner_digest, score_entry, scorer_version, select_entries

    ids = [c.case_id for c in recorded.cases]
    categories = list(dict.fromkeys(category_of_id(i) for i in ids))
    single = [c for c in categories if c not in MT_CATEGORIES]
    single_ids = [i for i in ids if category_of_id(i) in single]
    entries: dict[str, Any] = {e.id: e for e in select_entries(single, None, single_ids)} if single_ids else {}
    multi = [c for c in categories if c in MT_CATEGORIES]
    if multi:
        from servepack.smoke import sandbox
        from servepack.smoke.bfcl import multi_turn, multi_turn_drive

        sandbox.require()
        entries |= {e.id: e for e in multi_turn.select(multi, None, [i for i in ids if i not in entries])[0]}

    def judge(case_id: str, response: dict[str, Any]) -> Verdict:
        entry = entries[case_id]
        if entry.category in MT_CATEGORIES:
            return multi_turn_drive.score_response(entry, response)
        return score_entry(entry, body_message(response)[0])

    def flag(round_: list[Attempt]) -> bool:
        if not any("turns" in (a.response or {}) for a in round_):
            return False
        multi_turn_drive.flag_stream_mismatch(round_)
        return True

    return _Rules(judge, decode, scorer_version(categories), runner_digest(categories), flag if multi else None)


def _suite_rules(recorded: SuiteResult) -> _Rules:
    from servepack.smoke.cases import load_suite
    from servepack.smoke.runner import decision, runner_hash
    from servepack.smoke.scorer import SCORER_VERSION

    suite = load_suite(recorded.suite)
    by_id = {c.id: c for c in suite.select([c.case_id for c in recorded.cases])}

    def judge(case_id: str, response: dict[str, Any]) -> Verdict:
        message, finish = body_message(response)
        return score_message(by_id[case_id], message, finish_reason=finish)

    return _Rules(judge, decision, SCORER_VERSION, runner_hash(suite))
