"""A BFCL suite result shaped as the Berkeley Function Calling Leaderboard reports it.

Each entry's verdict is its first non-streamed answer, as the leaderboard's (which does not stream); the streamed
answer is reported beside it (streaming parity: decided the same way, and its own accuracy), never folded into the
pass. Per category: accuracy, n, and a Wilson 95% interval; n below the category's size in the pinned data means a
sample (the n entries whose sha256(id) is smallest), which `smoke run --full` replaces by every entry.

Aggregates, computed the leaderboard's way (bfcl-eval's `eval_runner_helper`): non-live "simple" is the unweighted
mean of simple_python, simple_java and simple_javascript; the non-live AST summary the unweighted mean of simple,
multiple, parallel and parallel_multiple; the live AST summary the mean of live_simple, live_multiple,
live_parallel and live_parallel_multiple weighted by each category's size; irrelevance the unweighted mean of
irrelevance and live_irrelevance; relevance is live_relevance (its Wilson interval); multi-turn the unweighted
mean of multi_turn_base, miss_func, miss_param and long_context. An aggregate is given only
when every category in it was run (the leaderboard counts a missing one as 0). Its interval: a normal
approximation from its categories' Agresti–Coull variances, weighted as the mean is.

Entries a run could not execute (a multi-turn backend needing a package servepack does not carry) are listed in
the result's `skipped` and counted apart: accuracy is over the entries run, and the row says how many were skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servepack.smoke.bfcl.data import CATEGORIES, MT_CATEGORIES, canonical, category_of_id
from servepack.smoke.result import Attempt, CaseResult, SuiteResult, wilson95

# Entries per category in the pinned data (bfcl-eval 2026.3.23); a test checks them against the installed files.
SIZES = {
    "simple_python": 400, "simple_java": 100, "simple_javascript": 50, "multiple": 200, "parallel": 200,
    "parallel_multiple": 200, "irrelevance": 240, "live_simple": 258, "live_multiple": 1053, "live_parallel": 16,
    "live_parallel_multiple": 24, "live_relevance": 16, "live_irrelevance": 884,
    "multi_turn_base": 200, "multi_turn_miss_func": 200, "multi_turn_miss_param": 200, "multi_turn_long_context": 200,
}
_Z = 1.959963984540054


@dataclass(frozen=True)
class CategoryAccuracy:
    category: str
    n: int
    passed: int
    size: int  # entries of the category in the pinned data
    interval: tuple[float, float]
    stream_compared: int  # entries answered both ways
    stream_same: int  # of those, streamed answers that decided as the non-streamed one did
    stream_passed: int  # of those, streamed answers that pass
    skipped: int = 0  # entries of the selection not run (see the module doc)

    @property
    def accuracy(self) -> float:
        return self.passed / self.n if self.n else 0.0

    @property
    def sampled(self) -> bool:
        return self.n + self.skipped < self.size


@dataclass(frozen=True)
class Aggregate:
    name: str
    parts: tuple[str, ...]
    how: str  # "unweighted" or "weighted by category size"
    accuracy: float | None  # None when a part was not run
    interval: tuple[float, float] | None
    missing: tuple[str, ...]
    variance: float | None = None


@dataclass(frozen=True)
class Leaderboard:
    categories: dict[str, CategoryAccuracy]
    aggregates: list[Aggregate]

    @property
    def sampled(self) -> bool:
        return any(c.sampled for c in self.categories.values())

    @property
    def passed(self) -> int:
        """Entries whose counted (first non-streamed) answer passes, over every category run."""
        return sum(c.passed for c in self.categories.values())


def _first(case: CaseResult, mode: str) -> Attempt | None:
    return next((a for a in case.attempts if a.mode == mode and a.repeat_index == 0), None)


def _counted(case: CaseResult) -> Attempt:
    """The answer the leaderboard would score: the first non-streamed one (else the first there is)."""
    return _first(case, "nonstream") or case.attempts[0]


def category_accuracy(category: str, cases: list[CaseResult], skipped: int = 0) -> CategoryAccuracy:
    passed = sum(_counted(c).verdict.strict_pass for c in cases)
    pairs = [(ns, st) for c in cases if (ns := _first(c, "nonstream")) and (st := _first(c, "stream"))]
    same = sum(not ns.error and not st.error and "STREAM_MISMATCH" not in st.verdict.codes for ns, st in pairs)
    return CategoryAccuracy(category=category, n=len(cases), passed=passed, size=SIZES.get(category, len(cases)),
                            interval=wilson95(passed, len(cases)), stream_compared=len(pairs), stream_same=same,
                            stream_passed=sum(st.verdict.strict_pass for _, st in pairs), skipped=skipped)


def _mean(name: str, parts: tuple[str, ...], weights: dict[str, float], values: dict[str, tuple[float, float]],
          how: str) -> Aggregate:
    missing = tuple(p for p in parts if p not in values)
    if missing:
        return Aggregate(name, parts, how, None, None, missing)
    total = sum(weights[p] for p in parts)
    acc = sum(weights[p] * values[p][0] for p in parts) / total
    var = sum((weights[p] / total) ** 2 * values[p][1] for p in parts)
    half = _Z * math.sqrt(var)
    return Aggregate(name, parts, how, acc, (max(0.0, acc - half), min(1.0, acc + half)), (), var)


def _variance(c: CategoryAccuracy) -> float:
    p = (c.passed + 2) / (c.n + 4)  # Agresti–Coull: no zero width at 0 or 1
    return p * (1 - p) / (c.n + 4)


def aggregates(cats: dict[str, CategoryAccuracy]) -> list[Aggregate]:
    values = {name: (c.accuracy, _variance(c)) for name, c in cats.items()}
    equal = {name: 1.0 for name in CATEGORIES}
    out = []
    simple = _mean("non-live simple", ("simple_python", "simple_java", "simple_javascript"), equal, values,
                   "unweighted")
    out.append(simple)
    if simple.accuracy is not None and simple.variance is not None:
        values["non-live simple"] = (simple.accuracy, simple.variance)
    out.append(_mean("non-live AST summary", ("non-live simple", "multiple", "parallel", "parallel_multiple"),
                     {**equal, "non-live simple": 1.0}, values, "unweighted"))
    live = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
    out.append(_mean("live AST summary", live, {p: float(SIZES[p]) for p in live}, values, "weighted by category size"))
    out.append(_mean("irrelevance", ("irrelevance", "live_irrelevance"), equal, values, "unweighted"))
    relevance = cats.get("live_relevance")
    out.append(Aggregate("relevance", ("live_relevance",), "the category itself", relevance.accuracy,
                         relevance.interval, ()) if relevance else
               Aggregate("relevance", ("live_relevance",), "the category itself", None, None, ("live_relevance",)))
    if any(c in cats for c in MT_CATEGORIES):
        out.append(_mean("multi-turn", MT_CATEGORIES, equal | {c: 1.0 for c in MT_CATEGORIES}, values, "unweighted"))
    return out


def leaderboard(result: SuiteResult) -> Leaderboard:
    """The leaderboard's view of a BFCL suite result (see the module doc)."""
    groups: dict[str, list[CaseResult]] = {}
    for case in result.cases:
        if case.attempts:
            groups.setdefault(canonical(case.category), []).append(case)
    skipped: dict[str, int] = {}
    for case_id in result.skipped:
        skipped[category_of_id(case_id)] = skipped.get(category_of_id(case_id), 0) + 1
    cats = {name: category_accuracy(name, groups[name], skipped.get(name, 0))
            for name in (*CATEGORIES, *MT_CATEGORIES) if name in groups}
    return Leaderboard(categories=cats, aggregates=aggregates(cats))


def is_bfcl_result(result: SuiteResult) -> bool:
    return result.suite == "bfcl" or result.suite.startswith("bfcl-")


def as_dict(board: Leaderboard) -> dict[str, object]:
    """The machine form (`--json`, `smoke score`): accuracies and intervals rounded to 4 places."""
    def r(x: float) -> float:
        return round(x, 4)

    return {
        "verdict": "first non-streamed answer; streamed answers reported apart (stream_*)",
        "sampled": board.sampled,
        "categories": {c.category: {"n": c.n, "size": c.size, "passed": c.passed, "accuracy": r(c.accuracy),
                                    "wilson95": [r(x) for x in c.interval], "stream_compared": c.stream_compared,
                                    "stream_same_decision": c.stream_same, "stream_passed": c.stream_passed,
                                    "skipped": c.skipped}
                       for c in board.categories.values()},
        "aggregates": {a.name: {"accuracy": None if a.accuracy is None else r(a.accuracy),
                                "ci95": None if a.interval is None else [r(x) for x in a.interval],
                                "of": list(a.parts), "how": a.how, "missing": list(a.missing)}
                       for a in board.aggregates},
    }


COLUMNS = ["BFCL", "accuracy", "95% interval", "entries", "streamed (apart)"]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _span(iv: tuple[float, float]) -> str:
    return f"{100 * iv[0]:.1f}–{100 * iv[1]:.1f}%"


def rows(board: Leaderboard) -> list[list[str]]:
    """One row per category run, then one per aggregate, as text cells under `COLUMNS`."""
    out = []
    for c in board.categories.values():
        entries = f"{c.n} of {c.size}" + (f", {c.skipped} skipped (see skipped)" if c.skipped else "")
        entries += " (sample; --full for all)" if c.n + c.skipped < c.size else ""
        stream = (f"{c.stream_same}/{c.stream_compared} same decision, {c.stream_passed}/{c.stream_compared} pass"
                  if c.stream_compared else "not streamed")
        out.append([c.category, _pct(c.accuracy), _span(c.interval), entries, stream])
    for a in board.aggregates:
        if a.accuracy is None or a.interval is None:
            out.append([a.name, "n/a", "", f"not run: {', '.join(a.missing)}", ""])
        else:
            what = f"mean of {', '.join(a.parts)}" if len(a.parts) > 1 else a.parts[0]
            out.append([a.name, _pct(a.accuracy), _span(a.interval), f"{what} ({a.how})", ""])
    return out
