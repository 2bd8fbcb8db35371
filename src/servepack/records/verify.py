"""`servepack verify DIR`: recompute every hash in receipt.json and every summary figure from the raw files."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from servepack.bench.load import LoadSample
from servepack.bench.sample import RequestSample
from servepack.bench.summary import SUMMARY_SCHEMA, BenchSummary, all_fresh, cell_summary, prompt_token_report
from servepack.bench.sweep import CAPACITY_SCHEMA, CapacityResult
from servepack.engine.server import STAMP_SUFFIX
from servepack.errors import VerificationError
from servepack.host.energy import recomputed
from servepack.records.receipt import RECEIPT_NAME, Receipt, find_fallback_receipt, hash_files
from servepack.safepath import is_inside, name_problem, read_bounded, relative_path_problem
from servepack.settings import Settings
from servepack.smoke.result import SMOKE_SCHEMA_VERSION, CaseResult, SuiteResult

MEASURED_NAME = "MEASURED.md"
REPORT_NAME = "report.html"
# Derived from the covered files after the receipt was written; never covered, never an "extra" file.
DERIVED = frozenset({RECEIPT_NAME, MEASURED_NAME, REPORT_NAME})


@dataclass(frozen=True)
class Mismatch:
    """One thing that does not check out, named by the file it is in."""

    file: str
    what: str
    recorded: str
    recomputed: str

    def line(self) -> str:
        return f"{self.file}: {self.what}: recorded {self.recorded}, recomputed {self.recomputed}"


@dataclass(frozen=True)
class VerifyReport:
    run_dir: Path
    run_id: str
    files_checked: int
    figures_checked: int
    mismatches: tuple[Mismatch, ...]
    receipt_path: Path | None = None
    status: str = "complete"
    error: str | None = None

    @property
    def receipt_elsewhere(self) -> bool:
        """The run could not write its receipt into its own directory; it was written (and read) elsewhere."""
        return self.receipt_path is not None and self.receipt_path.parent != self.run_dir

    @property
    def ok(self) -> bool:
        return not self.mismatches

    @property
    def files_named(self) -> list[str]:
        return sorted({m.file for m in self.mismatches})

    def raise_for_mismatch(self) -> None:
        """VerificationError naming the files that do not verify."""
        if self.mismatches:
            first = self.mismatches[0].line()
            raise VerificationError(
                f"{self.run_dir} does not verify: {len(self.mismatches)} mismatch(es) in "
                f"{', '.join(self.files_named)}; first: {first}"
            )

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir), "run_id": self.run_id, "ok": self.ok,
            "files_checked": self.files_checked, "figures_checked": self.figures_checked,
            "mismatches": [m.__dict__ for m in self.mismatches], "status": self.status, "error": self.error,
            "receipt": str(self.receipt_path) if self.receipt_path else None,
            "receipt_elsewhere": self.receipt_elsewhere,
        }


# A figure check reads one summary file (and the raw files beside it) and returns (figures checked, mismatches).
FigureCheck = Callable[[Path, str, dict[str, Any]], tuple[int, list[Mismatch]]]


class UnreadableReceipt(VerificationError):
    """receipt.json is there but is not a receipt at all (binary, not JSON, nested too deep): bad input, exit 2."""

    exit_code = 2


MAX_RECEIPT_BYTES = 16 << 20
MAX_RESULT_FILE_BYTES = 256 << 20  # a results file (samples, timelines, summaries) of a long capacity run is MBs
RESTORE_HINT = "restore receipt.json from a copy of the results directory, or run again"


def locate_receipt(run_dir: Path, cache_dir: Path | None = None) -> Path:
    """run_dir/receipt.json, or the receipt a run wrote elsewhere because its directory was unwritable."""
    path = run_dir / RECEIPT_NAME
    _refuse_linked_receipt(path)
    if os.path.lexists(path):  # a FIFO or a folder there is named as what it is by read_receipt, never "missing"
        return path
    fallback = find_fallback_receipt(run_dir, cache_dir or Settings.load().cache_dir)
    if fallback is not None:
        return fallback
    stamps = sorted(run_dir.glob(f".*{STAMP_SUFFIX}"))
    if stamps:
        raise VerificationError(f"{path}: no receipt; servepack was killed during this run (it left {stamps[0].name}"
                                "), so nothing was sealed; the next servepack run stops any server it left behind")
    raise VerificationError(f"{path}: no receipt; not a servepack results directory (or the run never closed)")


def _refuse_linked_receipt(path: Path) -> None:
    if path.is_symlink():
        raise VerificationError(f"{path} is a symbolic link; a results directory holds no links, so this one is "
                                "not a sealed run")


def read_receipt(run_dir: Path, path: Path | None = None) -> Receipt:
    """The receipt of `run_dir` (or the one at `path`), as every reader takes it — verify, report, registry export,
    compare: a linked receipt.json is refused by each of them (only verify refused it before)."""
    path = path or run_dir / RECEIPT_NAME
    _refuse_linked_receipt(path)
    if not os.path.lexists(path):
        raise VerificationError(f"{path}: no receipt; not a servepack results directory (or the run never closed)")
    # something that is not a regular file (a FIFO, a device, a folder) is named as what it is, never opened blocking
    raw = read_bounded(path, MAX_RECEIPT_BYTES, RESTORE_HINT, error=UnreadableReceipt)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableReceipt(f"{path}: not UTF-8 JSON (binary at byte {exc.start}); {RESTORE_HINT}") from None
    try:
        return Receipt.model_validate_json(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        if err["type"] in ("json_invalid", "recursion_loop"):
            raise UnreadableReceipt(f"{path}: not JSON ({err['msg']}); {RESTORE_HINT}") from None
        where = ".".join(str(p) for p in err["loc"])
        raise VerificationError(f"{path}: field {where}: {err['msg']}") from None


def _named_inside(run_dir: Path, name: str) -> Path | None:
    """`run_dir/name` when a record's file name is a relative path that stays in the results directory."""
    if relative_path_problem(name) is not None:
        return None
    path = run_dir / name
    return path if is_inside(run_dir, path) else None


def read_result_bytes(path: Path) -> bytes:
    """A results directory's file: a regular file (a link refused) of at most MAX_RESULT_FILE_BYTES."""
    return read_bounded(path, MAX_RESULT_FILE_BYTES, "not a file servepack writes; restore the results directory",
                        follow=False)


def _read_text(path: Path) -> str:
    """A raw file's text; undecodable bytes become U+FFFD, so they show as a mismatch rather than a crash."""
    return read_result_bytes(path).decode("utf-8", errors="replace")


def _walk(run_dir: Path) -> tuple[list[Path], list[Path]]:
    """(regular files, links) under run_dir, never following a link."""
    files, links = [], []
    for root, dirs, names in os.walk(run_dir, followlinks=False):
        base = Path(root)
        for name in [*dirs, *names]:
            p = base / name
            if p.is_symlink():
                links.append(p)
            elif name in names and p.is_file():
                files.append(p)
    return sorted(files), sorted(links)


def check_hashes(run_dir: Path, receipt: Receipt) -> tuple[int, list[Mismatch]]:
    """Missing, changed and extra files against the receipt's sha256 list; any link is refused."""
    out = []
    files, links = _walk(run_dir)
    for link in links:
        rel = link.relative_to(run_dir).as_posix()
        out.append(Mismatch(rel, "is a symbolic link (results directories are sealed and hold no links)",
                            "a regular file", f"a link to {os.readlink(link)}"))
    present = [p for p in files
               if not p.name.startswith(".") and p.relative_to(run_dir).as_posix() not in DERIVED]
    actual = hash_files(run_dir, present)
    for name, digest in sorted(receipt.files.items()):
        if name not in actual:
            out.append(Mismatch(name, "file listed in receipt.json is missing", digest[:12], "no file"))
        elif actual[name] != digest:
            out.append(Mismatch(name, "sha256 changed", digest[:12], actual[name][:12]))
    for name in sorted(set(actual) - set(receipt.files)):
        out.append(Mismatch(name, "file not covered by receipt.json (added after the run)", "absent",
                            actual[name][:12]))
    return len(receipt.files), out


def _eq(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)), abs(float(b)))
        except (TypeError, ValueError):
            return False
    return bool(a == b)


class Figures:
    """Collects comparisons of recorded vs recomputed figures for one file."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.count = 0
        self.mismatches: list[Mismatch] = []

    def check(self, what: str, recorded: Any, recomputed: Any) -> None:
        self.count += 1
        if not _eq(recorded, recomputed):
            self.mismatches.append(Mismatch(self.file, what, repr(recorded), repr(recomputed)))

    def result(self) -> tuple[int, list[Mismatch]]:
        return self.count, self.mismatches


M = TypeVar("M", bound=BaseModel)
S = TypeVar("S", bound=RequestSample)


def _parse(model: type[M], doc: dict[str, Any], name: str, what: str) -> tuple[M | None, list[Mismatch]]:
    """`doc` as `model`, or None and the one mismatch naming where it does not parse."""
    try:
        return model.model_validate(doc), []
    except ValidationError as exc:
        err = exc.errors()[0]
        return None, [Mismatch(name, f"does not parse as {what} at {'.'.join(map(str, err['loc']))}", "valid",
                               err["msg"])]


def check_smoke(run_dir: Path, name: str, doc: dict[str, Any]) -> tuple[int, list[Mismatch]]:
    """Suite and category pass counts from the per-case verdicts; case verdicts from their attempts."""
    suite, bad = _parse(SuiteResult, doc, name, "a smoke result")
    if suite is None:
        return 1, bad
    f = Figures(name)
    raw_name = (Path(name).parent / f"{suite.suite}.cases.jsonl").as_posix()
    raw_path = None if name_problem(suite.suite) else _named_inside(run_dir, raw_name)
    if raw_path is None:
        f.mismatches.append(Mismatch(name, f"suite {suite.suite!r} names a file outside the results directory",
                                     "a plain suite name", "refused"))
    elif raw_path.is_file():
        _check_raw_cases(f, raw_path, raw_name, suite)
    for case in suite.cases:
        strict = all(a.verdict.strict_pass for a in case.attempts)
        lenient = all(a.verdict.lenient_pass for a in case.attempts)
        f.check(f"cases[{case.case_id}].strict_pass", case.strict_pass, strict)
        f.check(f"cases[{case.case_id}].lenient_pass", case.lenient_pass, lenient)
        codes = {c for a in case.attempts for c in a.verdict.codes}
        f.check(f"cases[{case.case_id}].codes", sorted(set(case.codes)), sorted(codes))
    f.check("n", suite.n, len(suite.cases))
    f.check("strict_passed", suite.strict_passed, sum(c.strict_pass for c in suite.cases))
    f.check("lenient_passed", suite.lenient_passed, sum(c.lenient_pass for c in suite.cases))
    by_cat: dict[str, list[Any]] = {}
    for case in suite.cases:
        by_cat.setdefault(case.category, []).append(case)
    f.check("categories (names)", sorted(suite.categories), sorted(by_cat))
    for cat, score in sorted(suite.categories.items()):
        cases = by_cat.get(cat, [])
        f.check(f"categories[{cat}].n", score.n, len(cases))
        f.check(f"categories[{cat}].strict_passed", score.strict_passed, sum(c.strict_pass for c in cases))
        f.check(f"categories[{cat}].lenient_passed", score.lenient_passed, sum(c.lenient_pass for c in cases))
    counts = Counter(code for case in suite.cases for code in set(case.codes))
    f.check("failure_codes", dict(sorted(suite.failure_codes.items())), dict(sorted(counts.items())))
    return f.result()


def _raw_samples(run_dir: Path, requests_file: str, model: type[S], *, outside: Mismatch,
                 missing: Mismatch) -> tuple[list[S] | None, list[Mismatch]]:
    """The raw file of a summary (`requests_file`, inside `run_dir`) read as `model` samples, or None and why:
    `outside` when the name leaves the results directory, `missing` when no file is there, else the raw file's own
    mismatch (the first line that does not parse)."""
    raw = _named_inside(run_dir, requests_file)
    if raw is None:
        return None, [outside]
    if not raw.is_file():
        return None, [missing]
    raw_figures = Figures(requests_file)
    return _read_samples(raw, raw_figures, model), raw_figures.mismatches


def _read_samples(path: Path, f: Figures, model: type[S]) -> list[S] | None:
    samples = []
    for i, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            samples.append(model.model_validate_json(line))
        except ValidationError as exc:
            err = exc.errors()[0]
            f.mismatches.append(Mismatch(f.file, f"line {i} does not parse at {'.'.join(map(str, err['loc']))}",
                                         "a request sample", err["msg"]))
            return None
    return samples


def _check_stats(f: Figures, where: str, recorded: dict[str, Any], recomputed: dict[str, Any]) -> None:
    for key in sorted(set(recorded) | set(recomputed)):
        a, b = recorded.get(key), recomputed.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            _check_stats(f, f"{where}.{key}", a, b)
        else:
            f.check(f"{where}.{key}", a, b)


def check_bench(run_dir: Path, name: str, doc: dict[str, Any]) -> tuple[int, list[Mismatch]]:
    """Every cell statistic of server_bench.json, recomputed from requests.jsonl with the bench's own code."""
    f = Figures(name)
    summary, bad = _parse(BenchSummary, doc, name, "a bench summary")
    if summary is None:
        return 1, bad
    samples, bad = _raw_samples(
        run_dir, summary.requests_file, RequestSample,
        outside=Mismatch(name, f"requests_file {summary.requests_file!r} is not a file name inside the results "
                         "directory", "a plain relative name", "refused"),
        missing=Mismatch(name, f"raw file {summary.requests_file} is missing", "present", "no file"))
    if samples is None:
        return 1, bad
    measured = [s for s in samples if not s.warmup]
    keys = sorted({(s.context_tokens, s.concurrency) for s in measured})
    f.check("cells (context_tokens, concurrency)", sorted((c.context_tokens, c.concurrency) for c in summary.cells
                                                          if c.n), keys)
    for cell in summary.cells:
        group = [s for s in measured if (s.context_tokens, s.concurrency) == (cell.context_tokens, cell.concurrency)]
        again = cell_summary(group, context_tokens=cell.context_tokens, concurrency=cell.concurrency,
                             settings=summary.settings, deferred_max=cell.requests_deferred_max,
                             metrics_diff=cell.metrics_diff, stopped=cell.stopped,
                             interval_stop=cell.interval.stopped_by if cell.interval else None)
        where = f"cells[ctx={cell.context_tokens},c={cell.concurrency}]"
        _check_stats(f, where, cell.model_dump(mode="json"), again.model_dump(mode="json"))
    for ce in summary.energy:  # joules per output token: the recorded device joules over the cell's own tokens
        group = [s for s in measured if (s.context_tokens, s.concurrency) == (ce.context_tokens, ce.concurrency)]
        again_e = recomputed(ce.energy, sum(s.generated_tokens or 0 for s in group))
        _check_stats(f, f"energy[ctx={ce.context_tokens},c={ce.concurrency}]", ce.energy.model_dump(mode="json"),
                     again_e.model_dump(mode="json"))
    f.check("all_fresh", summary.all_fresh, all_fresh(measured))
    f.check("prompt_token_report", summary.prompt_token_report, prompt_token_report(measured))
    return f.result()


def _check_raw_cases(f: Figures, path: Path, raw_name: str, suite: SuiteResult) -> None:
    """Each case in the summary must be the case the runner logged, line by line, as it ran."""
    raw: dict[str, dict[str, Any]] = {}
    for i, line in enumerate(_read_text(path).splitlines(), 1):
        if line.strip():
            try:
                case = CaseResult.model_validate_json(line)
            except ValidationError:
                f.mismatches.append(Mismatch(raw_name, f"line {i} is not a case result", "a case", "invalid"))
                return
            raw[case.case_id] = case.model_dump(mode="json")
    f.check(f"cases (ids) against {raw_name}", sorted(c.case_id for c in suite.cases), sorted(raw))
    for case in suite.cases:
        if case.case_id in raw:
            f.check(f"cases[{case.case_id}] against {raw_name}", case.model_dump(mode="json") == raw[case.case_id],
                    True)


def check_capacity(run_dir: Path, name: str, doc: dict[str, Any]) -> tuple[int, list[Mismatch]]:
    """Each point's joules per output token, from its recorded device joules and its own requests' tokens."""
    f = Figures(name)
    result, bad = _parse(CapacityResult, doc, name, "a capacity result")
    if result is None:
        return 1, bad
    absent = Mismatch(name, f"raw file {result.requests_file!r} is missing or not inside the results directory",
                      "present", "no file")
    samples, bad = _raw_samples(run_dir, result.requests_file, LoadSample, outside=absent, missing=absent)
    if samples is None:
        return 1, bad
    for pe in result.energy:
        tokens = sum(s.generated_tokens or 0 for s in samples if s.point == pe.point)
        _check_stats(f, f"energy[point={pe.point}]", pe.energy.model_dump(mode="json"),
                     recomputed(pe.energy, tokens).model_dump(mode="json"))
    return f.result()


def _figure_check(doc: dict[str, Any]) -> FigureCheck | None:
    version = str(doc.get("schema_version", ""))
    return {SMOKE_SCHEMA_VERSION: check_smoke, SUMMARY_SCHEMA: check_bench,
            CAPACITY_SCHEMA: check_capacity}.get(version)


def verify_run(run_dir: Path, *, cache_dir: Path | None = None) -> VerifyReport:
    """Every hash and every summary figure of one results directory; mismatches are named, not raised."""
    if not run_dir.is_dir():
        raise VerificationError(f"{run_dir}: not a directory")
    receipt_path = locate_receipt(run_dir, cache_dir)
    receipt = read_receipt(run_dir, receipt_path)
    files_checked, mismatches = check_hashes(run_dir, receipt)
    figures = 0
    for name in sorted(receipt.files):
        path = _named_inside(run_dir, name)
        if path is None:
            mismatches.append(Mismatch(name, "receipt.json names a file outside the results directory", "a plain "
                                       "relative name", "refused"))
            continue
        if not name.endswith(".json") or not path.is_file():
            continue
        try:
            doc = json.loads(read_result_bytes(path))
        except (ValueError, RecursionError) as exc:
            mismatches.append(Mismatch(name, "not JSON", "JSON", str(exc)[:200] or type(exc).__name__))
            continue
        check = _figure_check(doc) if isinstance(doc, dict) else None
        if check is not None:
            n, found = check(run_dir, name, doc)
            figures += n
            mismatches.extend(found)
    return VerifyReport(run_dir, receipt.run_id, files_checked, figures, tuple(mismatches),
                        receipt_path=receipt_path, status=receipt.status, error=receipt.error)
