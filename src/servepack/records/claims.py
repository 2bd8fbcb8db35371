"""What a pack's rules let a set of runs claim: the tip of each kind, the headline, the noise floor."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servepack.bench.sample import RequestSample, metric_field
from servepack.bench.stats import Stat
from servepack.bench.summary import SUMMARY_SCHEMA, BenchSummary, Cell, figure_samples
from servepack.bench.sweep import CAPACITY_SCHEMA, CapacityResult
from servepack.errors import ServepackError, VerificationError
from servepack.host.contention import CONTENTION_SCHEMA, ContentionSummary
from servepack.host.memory import MEMORY_SCHEMA, MemorySummary
from servepack.packs import load_pack
from servepack.packs.schema import ClaimsPolicy, Headline, Pack
from servepack.records.policy import cell_quality
from servepack.records.receipt import RECEIPT_NAME, Receipt
from servepack.records.verify import read_receipt, read_result_bytes
from servepack.smoke.result import SMOKE_SCHEMA_VERSION, SuiteResult

CellKey = tuple[int, int, int]  # (context_tokens, concurrency, gen_tokens)


def read_json_file(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(read_result_bytes(path))
    except (ServepackError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


@dataclass
class RunView:
    """One results directory read back: its receipt and the summaries it covers, found by schema_version."""

    path: Path
    receipt: Receipt
    bench: BenchSummary | None = None
    bench_file: str | None = None
    smoke: list[tuple[str, SuiteResult]] = field(default_factory=list)
    memory: MemorySummary | None = None
    contention: ContentionSummary | None = None  # host_contention.json: bench and smoke phases
    capacity: CapacityResult | None = None  # capacity.json of a `servepack capacity` run
    problems: list[str] = field(default_factory=list)

    @property
    def preset(self) -> str | None:
        return self.receipt.preset.name if self.receipt.preset else None

    @property
    def when(self) -> str:
        return self.receipt.ended_at

    def cells(self) -> dict[CellKey, Cell]:
        if self.bench is None:
            return {}
        return {(c.context_tokens, c.concurrency, c.gen_tokens): c for c in self.bench.cells}

    @cached_property
    def requests(self) -> list[RequestSample]:
        """Measured (non-warmup) request samples of the bench, from the raw per-request file."""
        if self.bench is None:
            return []
        path = self.path / self.bench.requests_file
        out = []
        if path.is_file():
            text = read_result_bytes(path).decode("utf-8", errors="replace")
            for i, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    sample = RequestSample.model_validate_json(line)
                except ValidationError as exc:
                    raise VerificationError(f"{path}: line {i} is not a request sample of this servepack "
                                            f"({exc.error_count()} errors)") from None
                if not sample.warmup:
                    out.append(sample)
        return out

    def memory_summary(self) -> MemorySummary | None:
        return self.memory or (self.bench.memory if self.bench else None)


def load_run(run_dir: Path) -> RunView:
    """Read a results directory; a summary that does not parse is noted, not fatal."""
    receipt = read_receipt(run_dir)
    view = RunView(path=run_dir, receipt=receipt)
    for name in sorted(receipt.files):
        if not name.endswith(".json"):
            continue
        doc = read_json_file(run_dir / name)
        version = (doc or {}).get("schema_version")
        try:
            if version == SUMMARY_SCHEMA and view.bench is None:
                view.bench, view.bench_file = BenchSummary.model_validate(doc), name
            elif version == SMOKE_SCHEMA_VERSION:
                view.smoke.append((name, SuiteResult.model_validate(doc)))
            elif version == MEMORY_SCHEMA and view.memory is None:
                view.memory = MemorySummary.model_validate(doc)
            elif version == CONTENTION_SCHEMA and view.contention is None:
                view.contention = ContentionSummary.model_validate(doc)
            elif version == CAPACITY_SCHEMA and view.capacity is None:
                view.capacity = CapacityResult.model_validate(doc)
            elif isinstance(version, str) and version.startswith("servepack.capacity/"):
                view.problems.append(f"{name}: {version} is not this servepack's {CAPACITY_SCHEMA}; not shown")
        except ValidationError as exc:
            view.problems.append(f"{name}: does not parse ({exc.error_count()} errors)")
    return view


def pack_of(receipt: Receipt) -> Pack:
    """The pack a run used: its file if still there, else the shipped pack of the same id."""
    try:
        return load_pack(receipt.pack.path).pack
    except ServepackError:
        return load_pack(receipt.pack.id).pack


def history(run_dir: Path) -> list[RunView]:
    """This run and its siblings (the pack's results history), oldest first."""
    runs = []
    parent = run_dir.resolve().parent
    dirs = {p.resolve() for p in parent.iterdir() if (p / RECEIPT_NAME).is_file()} | {run_dir.resolve()}
    for d in sorted(dirs):
        try:
            runs.append(load_run(d))
        except VerificationError:
            continue  # a sibling without a readable receipt is not history
    return sorted(runs, key=lambda r: (r.when, r.path.name))


def is_noise_floor(cell: Cell, policy: ClaimsPolicy) -> bool:
    """The seed's rule: 8 generated tokens (the pack's noise floor) and fewer are shown, never headlined."""
    return cell.noise_floor or cell.gen_tokens <= policy.noise_floor_gen_tokens


def stat_name(metric: str, source: str) -> str:
    """The Cell field that carries a headline/promotion metric."""
    return metric_field(metric, source)


def cell_stat(cell: Cell, metric: str, source: str) -> Stat:
    stat: Stat = getattr(cell, stat_name(metric, source))
    return stat


def metric_samples(view: RunView, key: CellKey, metric: str, source: str) -> list[float]:
    """Per-request samples behind one cell's metric, selected as the bench summary selects them."""
    ctx, conc, gen = key
    name = stat_name(metric, source)
    out = []
    group = [s for s in view.requests if (s.context_tokens, s.concurrency, s.gen_tokens_requested) == (ctx, conc, gen)]
    for s in figure_samples(group)[0]:
        if not s.ok:
            continue
        if metric in ("prefill_tok_s", "ttft_ms") and not s.fresh:
            continue
        if metric == "decode_tok_s" and s.short_output:
            continue
        value = getattr(s, name)
        if value is not None:
            out.append(float(value))
    return out


@dataclass(frozen=True)
class HeadlineChoice:
    """The one figure the pack stands behind, or why there is none."""

    headline: Headline
    run: RunView | None
    cell: Cell | None
    stat: Stat | None
    why_none: str | None = None
    passed_over: tuple[str, ...] = ()
    noisy: tuple[tuple[RunView, str], ...] = ()  # newer runs not claim-grade, and why
    quality_recorded: bool = True  # False: the chosen cell predates host watching and interval targets

    @property
    def hardware_id(self) -> str | None:
        return self.run.receipt.hardware.attributed_id if self.run else None


def select_headline(runs: Iterable[RunView], policy: ClaimsPolicy) -> HeadlineChoice:
    """The newest complete, claim-grade run of the headline's preset with its context × gen cell.

    Never a noise floor; never a cell whose clean samples (contended and stalled ones are set aside, in no figure;
    before they were, any of them spoiled the cell) give a 95% interval wider than the pack's target (those runs
    are passed over and kept in `noisy`, to be shown labelled).
    """
    h = policy.headline
    passed = []
    noisy: list[tuple[RunView, str]] = []
    for run in sorted(runs, key=lambda r: (r.when, r.path.name), reverse=True):
        if run.bench is None:
            continue
        if run.preset != h.preset:
            continue
        cell = run.cells().get((h.context_tokens, 1, h.gen_tokens))
        if cell is None:
            continue
        if is_noise_floor(cell, policy):
            passed.append(f"{run.path.name}: noise floor ({cell.gen_tokens} gen)")
            continue
        if run.receipt.status != "complete" or run.bench.status != "complete":
            passed.append(f"{run.path.name}: run {run.receipt.status}, bench {run.bench.status}")
            continue
        stat = cell_stat(cell, h.metric, h.source)
        problems = cell_quality(cell, policy)
        if stat.median is None and not (cell.n_set_aside and problems):
            passed.append(f"{run.path.name}: no {stat_name(h.metric, h.source)} samples")
            continue
        if problems:
            reason = "noisy: " + "; ".join(problems)
            passed.append(f"{run.path.name}: {reason}")
            noisy.append((run, reason))
            continue
        return HeadlineChoice(h, run, cell, stat, passed_over=tuple(passed), noisy=tuple(noisy),
                              quality_recorded=problems is not None)
    why = (f"no complete run of preset {h.preset} measured {h.context_tokens:,} prompt tokens × "
           f"{h.gen_tokens} generated tokens at concurrency 1 above the noise floor"
           + (f" on a quiet host within the ±{policy.interval_target_pct:g}% interval target ({len(noisy)} noisy "
              f"run{'s' if len(noisy) > 1 else ''} passed over)" if noisy else ""))
    return HeadlineChoice(h, None, None, None, why_none=why, passed_over=tuple(passed), noisy=tuple(noisy))


def tips_and_history(runs: list[RunView], key: Any) -> tuple[dict[Any, RunView], list[RunView]]:
    """The newest run per key binds (the tip); every older run with the same key is historical."""
    tips: dict[Any, RunView] = {}
    for run in sorted(runs, key=lambda r: (r.when, r.path.name)):
        k = key(run)
        if k is not None:
            tips[k] = run
    historical = [r for r in runs if key(r) is not None and tips[key(r)] is not r]
    return tips, historical
