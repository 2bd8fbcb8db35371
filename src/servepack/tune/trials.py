"""What a tune writes: its plan (tune.json), one line per trial (trials.jsonl) and its result (tune_result.json).

The trial log is the tune's memory: every trial, accepted or rejected, is one line written as soon as it ends, so
an interrupted tune resumes from it (`--resume DIR`) and proposes exactly what it would have proposed next.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import ConfigDict, Field, ValidationError

from servepack.errors import UsageError
from servepack.packs.schema import FlagValue
from servepack.records.verify import read_result_bytes
from servepack.safepath import kind_at
from servepack.store import scrubbed_text, write_bytes_atomic
from servepack.strict import Strict
from servepack.tune.space import SearchSpace, build_space

PLAN_SCHEMA: Final = "servepack.tune.plan/v1"
TRIAL_SCHEMA: Final = "servepack.tune.trial/v1"
RESULT_SCHEMA: Final = "servepack.tune.result/v1"
PLAN_NAME = "tune.json"
TRIALS_NAME = "trials.jsonl"
RESULT_NAME = "tune_result.json"
Metric = Literal["decode_tok_s", "prefill_tok_s", "ttft_ms"]
Phase = Literal["baseline", "screen", "race"]
TrialStatus = Literal["ok", "infeasible", "rejected"]


class Frozen(Strict):
    model_config = ConfigDict(frozen=True)


class Objective(Frozen):
    """What is maximised (or minimised, for TTFT) and under which constraints."""

    metric: Metric
    source: Literal["server", "client"] = "server"
    context_tokens: int = Field(gt=0)
    gen_tokens: int = Field(gt=0)
    max_ttft_ms: float | None = Field(None, gt=0, description="a trial whose median TTFT is above is infeasible")

    @property
    def higher_is_better(self) -> bool:
        return self.metric != "ttft_ms"

    def label(self) -> str:
        return f"{self.metric} ({self.source}) at {self.context_tokens} prompt, {self.gen_tokens} generated"


class TunePlan(Frozen):
    """Everything that fixes which trials a tune proposes; a resumed tune reads it back unchanged."""

    schema_version: Literal["servepack.tune.plan/v1"] = PLAN_SCHEMA
    pack_ref: str = Field(description="the pack file the tune serves (absolute path)")
    pack_id: str
    base_preset: str
    base_flags: dict[str, FlagValue]
    space: SearchSpace
    objective: Objective
    samples: int = Field(ge=1, description="measured requests per trial (each trial a fresh server)")
    confirm_samples: int = Field(ge=1, description="requests per side in the final compare")
    budget_trials: int = Field(ge=1)
    budget_time_s: float | None = Field(None, gt=0)
    screen_trials: int = Field(ge=1)
    race_arms: int = Field(ge=1)
    race_max_trials: int = Field(ge=1, description="trials per raced arm, screen included")
    strategy: Literal["exhaustive", "optuna"]
    seed: int = Field(ge=0, lt=2**31, description="the TPE sampler seed (plus the number of trials so far)")
    server_bin: str | None = None
    model_file: str | None = None
    created_at: str


class Figure(Frozen):
    """A metric over one trial's requests: median and the bootstrap 95% interval of the median."""

    n: int
    median: float | None
    ci95_low: float | None
    ci95_high: float | None


class TrialRecord(Frozen):
    """One trial: a fresh server with the configuration's flags, measured, or rejected with its reason."""

    schema_version: Literal["servepack.tune.trial/v1"] = TRIAL_SCHEMA
    trial: int = Field(ge=1)
    phase: Phase
    key: str = Field(description="the configuration as sorted flag=value text")
    config: dict[str, FlagValue] = Field(description="the tuned flags of this trial")
    status: TrialStatus
    reason: str | None = Field(None, description="why a trial was rejected or infeasible")
    log_tail: str | None = Field(None, description="the server log's last lines, for rejected trials")
    samples: list[float] = Field(default_factory=list, description="per-request values of the objective metric")
    figures: dict[str, Figure] = Field(default_factory=dict, description="decode_tok_s, prefill_tok_s, ttft_ms")
    results_dir: str = Field(description="the trial's results directory, relative to the tune directory")
    started_at: str
    wall_s: float


def write_plan(tune_dir: Path, plan: TunePlan) -> None:
    write_bytes_atomic(tune_dir / PLAN_NAME, (plan.model_dump_json(indent=2) + "\n").encode())


def read_plan(tune_dir: Path) -> TunePlan:
    path = tune_dir / PLAN_NAME
    if (kind := kind_at(tune_dir)) not in (None, "a folder"):
        raise UsageError(f"--resume {tune_dir}: not a folder ({kind}); give the directory a tune wrote")
    if (kind := kind_at(path)) is None:
        raise UsageError(f"--resume {tune_dir}: no {PLAN_NAME}; give the directory a tune wrote")
    if kind != "a regular file":
        raise UsageError(f"--resume {tune_dir}: {PLAN_NAME} is not a regular file ({kind}); give the directory a "
                         "tune wrote")
    try:
        plan = TunePlan.model_validate_json(read_result_bytes(path))
    except (ValidationError, ValueError) as exc:
        first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise UsageError(f"--resume {tune_dir}: {PLAN_NAME} is not a tune plan of this servepack ({first})") from None
    build_space({k: list(v) for k, v in plan.space.params.items()}, str(path))  # the limits of a --space file
    return plan


def read_trials(tune_dir: Path) -> list[TrialRecord]:
    """Every complete line of trials.jsonl; a torn last line (an interrupted write) is dropped."""
    path = tune_dir / TRIALS_NAME
    if (kind := kind_at(path)) is None and not path.is_symlink():
        return []
    if kind != "a regular file":  # a FIFO read as "no trials" would start over, then block on the first append
        raise UsageError(f"--resume {tune_dir}: {TRIALS_NAME} is not a regular file ({kind or 'a broken link'}); "
                         "give the directory a tune wrote")
    text = read_result_bytes(path).decode("utf-8", errors="replace")
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(TrialRecord.model_validate_json(line))
        except ValidationError as exc:
            if i == len(lines) and not text.endswith("\n"):
                break
            raise UsageError(f"{path}: line {i} is not a trial record ({exc.error_count()} errors)") from None
    numbers = [t.trial for t in out]
    if numbers != sorted(set(numbers)):
        raise UsageError(f"{path}: trial numbers repeat or go back; the log was edited")
    return out


def append_trial(tune_dir: Path, record: TrialRecord) -> None:
    """Append one line and fsync, so a crash right after keeps it."""
    path = tune_dir / TRIALS_NAME
    if path.is_file() and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
        _drop_torn_line(path)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(scrubbed_text(record.model_dump_json()) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _drop_torn_line(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: data.rfind(b"\n") + 1])


def dump(obj: dict[str, Any]) -> str:
    return json.dumps(obj, indent=2, default=str) + "\n"
