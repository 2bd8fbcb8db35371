"""What a load point is asked and what it gives back: its settings (`LoadSettings`: shape, sizes, bounds, client
workers), one line of its requests.jsonl (`LoadSample`: a bench `RequestSample` plus where in the load it was sent)
and the point as run (`PointRun`: its samples, wall time, arrival rates, observer cost and energy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from servepack.bench.config import MAX_CONCURRENCY
from servepack.bench.observer import ObserverCost
from servepack.bench.sample import RequestSample
from servepack.bench.shapes import SHAPES, shape_for
from servepack.bench.shapes.base import Arrivals
from servepack.host.energy import Energy
from servepack.strict import Strict


def _known_shape(name: str) -> str:
    if name not in SHAPES:
        *rest, last = (repr(x) for x in SHAPES)
        raise ValueError(f"Input should be {', '.join(rest) + ' or ' if rest else ''}{last}")
    return name


Shape = Annotated[str, AfterValidator(_known_shape)]  # a name in `bench.shapes.SHAPES`
LOAD_SCHEMA = "servepack.bench.load_request/v1"
MAX_REQUESTS = 100_000  # per point, whatever the flags say
MAX_WORKERS = 32


class LoadSettings(Strict):
    """One load point's shape and bounds (the sweep changes only the level)."""

    model_config = ConfigDict(frozen=True)

    shape: Shape = "closed"
    arrivals: Arrivals = "constant"
    prompt_tokens: int = Field(256, ge=1, description="server-counted prompt tokens of a single-shot request")
    gen_tokens: int = Field(64, ge=1)
    duration_s: float = Field(60.0, gt=0, le=3600, description="no request is sent after this long into a point")
    max_requests: int = Field(200, ge=1, le=MAX_REQUESTS, description="requests per point at most")
    turns: int = Field(4, ge=1, le=64, description="agent: turns per session")
    tool_tokens: int = Field(64, ge=1, description="agent: tokens of the tool result appended each turn")
    seed: int = 20240917
    endpoint: Literal["chat", "completion"] = "chat"
    timeout_s: float = Field(120.0, gt=0)
    temperature: float = Field(0.0, ge=0)
    max_in_flight: int = Field(MAX_CONCURRENCY, ge=1, le=MAX_CONCURRENCY)
    stall_floor_s: float = Field(30.0, gt=0)
    workers: int = Field(1, ge=1, le=MAX_WORKERS, description="client processes the streams or arrivals are "
                         "spread over (closed and open shapes); 1: this process alone")
    client_lag_bound_ms: float | None = Field(None, gt=0, le=60_000, description="launch lag p99 above this "
                                              "marks a point client-limited (default: 10 ms, or 5% of the "
                                              "tightest TTFT SLO bound when that is larger)")

    @model_validator(mode="after")
    def _shape_check(self) -> LoadSettings:
        why = shape_for(self.shape).check(self)
        if why:
            raise ValueError(why)
        return self


class LoadSample(RequestSample):
    """One line of a load's requests.jsonl: a bench RequestSample plus where in the load it was sent."""

    schema_version: Literal["servepack.bench.load_request/v1"] = LOAD_SCHEMA  # type: ignore[assignment]
    point: int = Field(description="sweep point index")
    shape: Shape
    level: float = Field(description="streams (closed), arrivals/s (open) or sessions (agent)")
    scheduled_s: float | None = Field(None, description="planned send, seconds from the point start (open: the "
                                      "arrival; closed/agent: when the stream was free to send)")
    sent_s: float = Field(description="actual send (wire), seconds from the point start")
    launch_lag_ms: float | None = Field(None, description="actual − scheduled send: how long the client held the "
                                        "request back (None: dropped)")
    lateness_ms: float | None = Field(None, description="open loop: actual − planned send (= launch_lag_ms)")
    in_flight: int = Field(description="requests in flight when this one was sent, itself included")
    session: int | None = None
    turn: int | None = None
    cache_n: int | None = Field(None, description="prompt tokens the server reused from its cache")
    warm: bool = Field(False, description="the prompt extends an earlier one (agent turns): never a claim figure")
    dropped: bool = Field(False, description="open loop: not sent, the in-flight bound was reached")


@dataclass
class PointRun:
    """What one load point did: its samples, its wall time, its arrival rates and what it cost to observe."""

    level: float
    samples: list[LoadSample]
    wall_s: float
    started_unix: float
    cost: ObserverCost
    rate_requested: float | None = None
    rate_scheduled: float | None = None
    rate_achieved: float | None = None
    stopped: str | None = None
    prompts_built: int = 0
    prompts_built_during: int = 0
    energy: Energy | None = None  # joules over the measured window, when the runner has a meter
