"""What a load shape is (`LoadShape`), and what every shape's coroutine works with: a point's plan built before its
clock (`PointPlan`), the point's mutable state while it runs (`PointState`, one `SentRequest` a request) and the
staggered start of streams (`start_slot`, `STREAM_GAP_S`).

A shape is asked only what differs between shapes: how a point's level maps to its request budget, its connections
and its prompts; how its requests are sent (its coroutine, through the sender's `send_one`, which sends through
`client.send`); what of its prompts goes back to the pool; and how its level reads (whole streams or a rate, whether
its requests are warm, whether it may be spread over client workers, what its settings must not combine).

A shape sees the settings and the sender through what it may read of them (`ShapeSettings`, `Sender`: what
`bench.load_settings.LoadSettings` and `bench.load_shapes.LoadSender` are to it), so the table stays below them:
`LoadSettings` checks a shape's name and its settings by the table.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from servepack.bench.client import StreamExchange
from servepack.bench.prompts import BuiltPrompt, PromptBuilder, Tokenizer

if TYPE_CHECKING:
    import httpx

    from servepack.bench.wire import WireClient

Arrivals = Literal["constant", "poisson"]  # an open point's arrival process
STREAM_GAP_S = 0.002  # closed/agent: stream k starts k × gap after the point (at most 1 s for all of them)


@dataclass
class SentRequest:
    ex: StreamExchange
    prompt_tokens: int
    exact: bool
    nonce: str
    stream: int
    in_flight: int
    scheduled_s: float | None = None
    session: int | None = None
    turn: int | None = None
    warm: bool = False
    dropped: bool = False


@dataclass
class PointState:
    """The mutable state of one point while it runs."""

    t0: float
    deadline: float
    budget: int
    t0_unix: float = 0.0
    used: int = 0
    built_during: int = 0
    sent: list[SentRequest] = field(default_factory=list)
    in_flight: int = 0
    issued: int = 0

    def take(self) -> bool:
        """One more request may be sent: the budget is not spent and the duration is not over."""
        if self.issued >= self.budget or time.perf_counter() >= self.deadline:
            return False
        self.issued += 1
        return True


@dataclass
class PointPlan:
    """What a point sends, built before its clock starts: its prompts, their encoded bodies (single-shot requests),
    the arrivals' planned offsets (seconds from the point's start), the tool results appended to sessions, and the
    streams or arrivals a client worker runs (`ids`; None: all of them, in this process)."""

    prompts: list[BuiltPrompt]
    bodies: list[bytes] = field(default_factory=list)
    offsets: list[float] = field(default_factory=list)
    tools: list[BuiltPrompt] = field(default_factory=list)
    ids: list[int] | None = None


class ShapeSettings(Protocol):
    """What a shape reads of a point's settings (`LoadSettings` has them all)."""

    @property
    def shape(self) -> str: ...
    @property
    def arrivals(self) -> Arrivals: ...
    @property
    def duration_s(self) -> float: ...
    @property
    def max_requests(self) -> int: ...
    @property
    def max_in_flight(self) -> int: ...
    @property
    def turns(self) -> int: ...
    @property
    def tool_tokens(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def endpoint(self) -> Literal["chat", "completion"]: ...
    @property
    def workers(self) -> int: ...


class Sender(Protocol):
    """What a shape uses of the sender (`LoadSender`): its settings, its prompts and the one way to send."""

    base_url: str
    per_stream_rps: float | None  # closed loop: requests a second a stream sent, last point

    @property
    def s(self) -> ShapeSettings: ...
    @property
    def builder(self) -> PromptBuilder: ...
    @property
    def tok(self) -> Tokenizer: ...

    def take_prompts(self, n: int) -> list[BuiltPrompt]:
        """`n` prompts: the pool's first, then new ones."""
        ...

    def encode(self, prompt: BuiltPrompt) -> bytes:
        """A single-shot request's JSON body, encoded before the point's clock starts."""
        ...

    def body_for(self, text: str, *, cache: bool) -> dict[str, Any]:
        """A request's JSON body for `text`."""
        ...

    async def send_one(self, wire: WireClient, p: PointState, body: dict[str, Any] | bytes,
                       item: SentRequest) -> StreamExchange:
        """Send one request of the point and record it in `p.sent`."""
        ...


async def start_slot(p: PointState, k: int, streams: int) -> float:
    """Wait for stream k's start slot (k × gap after the point's start); its offset in seconds."""
    offset = k * min(STREAM_GAP_S, 1.0 / max(streams, 1))
    delay = p.t0 + offset - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    return offset


class ShapeDefaults:
    """What most shapes answer alike (a shape may inherit it): every setting combines, the budget is
    `max_requests`, a connection a stream, and a point tells the next nothing."""

    def check(self, settings: ShapeSettings) -> str | None:
        return None

    def budget(self, settings: ShapeSettings, level: float) -> int:
        return settings.max_requests

    def width(self, level: float, streams: int) -> int:
        return streams

    def learn(self, sender: Sender, requests: int, wall_s: float, streams: int) -> None:
        return None


class LoadShape(Protocol):
    """One load shape: a module implementing this and one line in `bench.shapes.SHAPES`."""

    name: str  # --shape NAME, LoadSettings.shape, a request's `shape`
    help: str  # what `--shape` says of it
    unit: str  # what its level counts: capacity.json's level_unit and every line that names a level
    # The level counts concurrent streams or sessions: a whole number, bounded by --max-concurrency, compared with
    # the server's slots, and each request's concurrency figure. Otherwise it is a rate (bounded by --max-rate) and a
    # request's concurrency is the requests in flight when it was sent.
    counts_streams: bool
    # Requests go out on a planned schedule of arrivals: their launch lag is their lateness, the point records its
    # requested, scheduled and achieved rates, --arrivals picks the process, and spread points are dealt out by
    # arrival (otherwise by stream).
    scheduled: bool
    # Requests extend earlier ones (multi-turn sessions): warm requests count for the SLOs, cache_n is shown, a
    # request the server reused a prompt for is warm, and the figures are never a claim's.
    warm: bool
    spreads: bool  # a point may be spread over --client-workers

    def check(self, settings: ShapeSettings) -> str | None:
        """Why these settings cannot run this shape (one line naming the fix), or None."""
        ...

    def budget(self, settings: ShapeSettings, level: float) -> int:
        """A point's request budget at `level`."""
        ...

    def width(self, level: float, streams: int) -> int:
        """Connections opened before the point's clock (more open as needed)."""
        ...

    def plan(self, sender: Sender, index: int, level: float, budget: int, streams: int) -> PointPlan:
        """The point's prompts (from the sender's pool first) and what else it needs before its clock."""
        ...

    async def send(self, sender: Sender, client: httpx.AsyncClient | None, wire: WireClient, p: PointState,
                   streams: int, plan: PointPlan) -> None:
        """Send the point's requests, each through `sender.send_one`, until its budget or duration ends it.
        `client` counts tokens (None in a client worker process, which runs only shapes that spread)."""
        ...

    def unsent(self, prompts: list[BuiltPrompt], used: int, issued: int) -> list[BuiltPrompt]:
        """The prompts a point (or a worker's share) did not send, still fresh, back to the pool."""
        ...

    def learn(self, sender: Sender, requests: int, wall_s: float, streams: int) -> None:
        """What the point just run (`requests` sent over `wall_s` seconds) tells the sender for the next point."""
        ...
