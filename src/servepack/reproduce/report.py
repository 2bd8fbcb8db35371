"""reproduce.json: what a reproduction found, versioned; written into the run's results directory."""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field

from servepack.reproduce.verdict import Verdict
from servepack.strict import Strict

REPORT_SCHEMA: Final = "servepack.reproduce/v1"


class VerdictRow(Strict):
    """One metric of one record cell: its verdict, the reason in figures, and both sides' figures."""

    cell: str
    metric: str
    verdict: Verdict
    reason: str
    record_median: float | None
    record_samples: list[float]
    record_source: str | None = Field(description="where the record states the figure")
    run_median: float | None
    run_n: int
    run_ci95: list[float] | None = Field(description="95% bootstrap interval of the run's median; None below n=5")
    band: list[float] | None = Field(description="the record's spread joined with ±tolerance around its median")


class ReproduceReport(Strict):
    schema_version: Literal["servepack.reproduce/v1"] = REPORT_SCHEMA
    record: dict[str, str | None] = Field(description="id, sha256 of the record file's bytes, source, origin_url")
    pack: str | None
    dry_run: bool
    comparable: bool = Field(description="hardware, engine build and model bytes the same, no launch blocker")
    comparability: list[dict[str, str]] = Field(description="what, state (same/differs/unknown), detail")
    launch: dict[str, Any] = Field(description="recorded argv, the argv launched (or that would be), flags, rewrites")
    protocol: dict[str, Any] | None
    tolerance_pct: float
    verdicts: list[VerdictRow]
    not_reproduced: list[str]
    run_dir: str | None
    exported: list[str] | None
    export_error: str | None
