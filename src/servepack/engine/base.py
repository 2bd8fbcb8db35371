"""The engine seam: what every serving engine gives a run, whatever launches it.

An `Engine` turns a pack's engine pin and a preset into a running `Endpoint`: it locates its binaries (facts for
the receipt), builds each process's argv, launches them, waits until the endpoint answers, and tears everything
down on every exit path. Measurers (bench, smoke) only ever see the `Endpoint`: a base URL, a model name, the
processes behind it and a liveness check. An endpoint may stand on several processes and several hosts (an RPC
head with its workers), so it carries a list of `EngineProcess`, each with its host, role, argv and binary hash.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from servepack.engine.locate import EngineFacts
from servepack.errors import UsageError
from servepack.host.fingerprint import HostFingerprint
from servepack.packs import LoadedPack
from servepack.packs.schema import EnginePin, Preset, Topology
from servepack.progress import Progress
from servepack.weights.resolve import ModelRef


@dataclass
class EngineProcess:
    """One process an endpoint stands on; `pid` is None for a process servepack did not start."""

    role: str
    host: str
    argv: list[str]
    binary_sha256: str | None
    pid: int | None = None
    exit_code: int | None = None
    log: str | None = None
    fingerprint: HostFingerprint | None = None  # the host it runs on, where known (an RPC worker serves its own)
    endpoint: str | None = None  # host:port it serves on (an RPC worker's rpc-server)
    rpc_protocol: str | None = None


class Liveness(Protocol):
    def check_alive(self) -> None: ...


@dataclass(frozen=True)
class Rest:
    """One answer to "is the server at rest?": no request in flight and every slot idle.

    `at_rest` is None when the server gives no way to tell (`reason` says why); `in_flight` counts requests being
    processed and waiting, `busy_slots` of `slots` are processing; `source` names what was read."""

    at_rest: bool | None
    source: str
    reason: str = ""
    in_flight: int | None = None
    busy_slots: int | None = None
    slots: int | None = None


class RestCheck(Protocol):
    """How an engine answers "at rest?" for its endpoint (the server's own counters, never a guess)."""

    def rest(self) -> Rest: ...


def rest_unknown(why: str) -> Rest:
    return Rest(at_rest=None, source="none", reason=why)


@dataclass
class Endpoint:
    """A served OpenAI-compatible endpoint, as a measurer sees it."""

    base_url: str
    model: str
    processes: list[EngineProcess] = field(default_factory=list)
    ready_s: float | None = None
    props: dict[str, Any] | None = None
    launched: bool = True
    watch: list[Liveness] = field(default_factory=list)
    launch_kind: str = "native"  # how the engine was started: a process on this host ("native"), or "docker"
    rest_check: RestCheck | None = None  # the engine's answer to "at rest?"; None: it cannot tell
    # A fresh server in place of this one (same argv, same port; returns the seconds it took), where the engine can
    # give one; None for a server servepack did not start.
    restart: Callable[[], float] | None = None

    def at_rest(self) -> Rest:
        """Whether the server is at rest now (no request in flight, every slot idle), by the engine's own check."""
        if self.rest_check is None:
            return rest_unknown("this engine gives no way to tell")
        return self.rest_check.rest()

    @property
    def pid(self) -> int | None:
        """The serving process whose memory the sampler follows (the head), if servepack started it."""
        return self.processes[0].pid if self.processes else None

    def check_alive(self) -> None:
        """Raise ServerDied (with the log's tail) if any process behind the endpoint has exited."""
        for w in self.watch:
            w.check_alive()


@dataclass(frozen=True)
class LaunchRequest:
    """Everything an engine needs to start serving one preset of a pack."""

    facts: EngineFacts | None
    pin: EnginePin
    model_path: Path | None
    preset: Preset
    host: str
    port: int
    log_dir: Path
    health_timeout_s: float
    extra_files: Mapping[str, Path] = field(default_factory=dict)
    progress: Progress | None = None
    model_ref: ModelRef | None = None  # a model the engine loads itself (repository id or directory), not a file
    topology: Topology | None = None  # an RPC split: the head gets --rpc, workers with `start` are launched too
    # flag families the command allowed (`--allow-server-flag`); the engine refuses any other at launch
    allowed_flags: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Split:
    """How an engine serves a pack's [topology]: the head binary to locate (None: its usual one) and the topology
    with every port the run picks bound, so the argv recorded is the one executed."""

    head: Path | None
    topology: Topology


def single_host(name: str) -> UsageError:
    """What an engine that serves on one host raises for a [topology] (the pack schema refuses it first)."""
    return UsageError(f"[topology]: engine {name!r} serves on one host; an RPC split needs engine.name = 'llama.cpp'")


class Engine(Protocol):
    """A serving engine. Implementations live one per module and are listed in `servepack.engine.ENGINES`."""

    name: ClassVar[str]
    # False for an engine that attaches to a server someone else runs: no weights are resolved, no facts known.
    launches: ClassVar[bool]

    def locate(self, pin: EnginePin, override: Path | None) -> EngineFacts | None:
        """The serving binary and its facts (path, hash, version, pin match); None where not knowable."""
        ...

    def split(self, loaded: LoadedPack, topology: Topology, override: Path | None) -> Split:
        """A model split over several hosts (the pack's [topology]): the head binary and the bound topology; a
        UsageError from an engine that serves on one host only."""
        ...

    def argv(self, req: LaunchRequest) -> list[str]:
        """The head process's argv exactly as it will be executed (recorded even if the launch fails)."""
        ...

    def launch(self, req: LaunchRequest) -> AbstractContextManager[Endpoint]:
        """Start serving, wait until healthy, yield the endpoint, and always tear down."""
        ...
