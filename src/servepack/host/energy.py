"""Energy meters: joules over a window from hardware counters; an absent or unreadable meter says why, never guesses.

Two meters, each a set of devices with a cumulative counter:
- `nvml`: each GPU's total-energy counter (millijoules since the driver loaded; 64-bit, never wraps), via host.nvml.
- `rapl`: the CPU packages and DRAM under /sys/class/powercap (`intel-rapl:*/energy_uj`, microjoules), which wrap at
  `max_energy_range_uj`. Core, uncore and psys zones overlap the package and are not summed. Since Linux 5.10 the
  files are root-only (CVE-2020-8694): on most hosts RAPL is recorded as unreadable with that reason.

`EnergyMeter` reads every counter now and then on a thread (so a RAPL wrap between two window ends is never
missed) and keeps a running total per device. `mark()` reads them all now and returns a `Mark`; `window(a, b)` is the
joules between two marks. A device that fails to read at any moment between the two marks has no figure for that
window (its counter may have wrapped unseen): the window records it as unreadable, with the error.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal

from pydantic import Field

from servepack.host import nvml
from servepack.host.ticker import Ticker
from servepack.strict import Strict

POWERCAP: Path = Path("/sys/class/powercap")
POLL_S = 5.0  # far below the fastest RAPL wrap seen (about 60 s for a package at full power with a 32-bit range)
SUMMED_RAPL = ("package", "dram")  # zones that do not overlap each other


class Unread(Exception):
    """A counter read that failed; the message is the reason recorded."""


@dataclass(frozen=True)
class Device:
    """One counter: its label, and a reader returning joules (cumulative, may wrap at `wrap_j`)."""

    label: str
    read_j: Callable[[], float]
    wrap_j: float | None = None  # the counter's range; None: it never wraps


class Source:
    """A meter's devices, or why it has none."""

    def __init__(self, meter: Literal["nvml", "rapl"], what: str, devices: Sequence[Device],
                 absent: str | None = None) -> None:
        self.meter, self.what, self.devices, self.absent = meter, what, list(devices), absent


def nvml_source() -> Source:
    what = "GPU total-energy counter (NVML)"
    count = nvml.device_count()
    if isinstance(count, nvml.Unreadable):
        return Source("nvml", what, [], count.reason)
    if count == 0:
        return Source("nvml", what, [], "NVML sees no GPU")
    nv = nvml.nvml()
    devices = []
    for i in range(count):
        name = nv.name(i) if not isinstance(nv, nvml.Unreadable) else nv
        label = f"GPU {i}" + ("" if isinstance(name, nvml.Unreadable) else f" ({name})")

        def read(i: int = i) -> float:
            v = nvml.energy_mj(i)
            if isinstance(v, nvml.Unreadable):
                raise Unread(v.reason)
            return v / 1000.0

        devices.append(Device(label, read))
    return Source("nvml", what, devices)


def _rapl_zone(zone: Path) -> Device | None:
    try:
        name = (zone / "name").read_text().strip()
    except OSError:
        return None
    if not name.startswith(SUMMED_RAPL):
        return None
    energy = zone / "energy_uj"
    wrap: float | None = None
    with contextlib.suppress(OSError, ValueError):
        wrap = (int((zone / "max_energy_range_uj").read_text()) + 1) / 1e6

    def read() -> float:
        try:
            return int(energy.read_text()) / 1e6
        except PermissionError:
            raise Unread(f"{energy}: permission denied (root-only since Linux 5.10, CVE-2020-8694)") from None
        except (OSError, ValueError) as exc:
            raise Unread(f"{energy}: {type(exc).__name__}: {exc}") from None

    return Device(f"{zone.name} ({name})", read, wrap)


def rapl_source(root: Path = POWERCAP) -> Source:
    what = "CPU package and DRAM energy (RAPL, powercap)"
    zones = sorted(root.glob("intel-rapl:*")) if root.is_dir() else []
    devices = [d for d in (_rapl_zone(z) for z in zones) if d is not None]
    if not devices:
        why = (f"no package or dram zone under {root}/intel-rapl:*" if zones else
               f"no {root}/intel-rapl:* (no RAPL on this CPU, or the powercap driver is not loaded)")
        return Source("rapl", what, [], f"RAPL absent: {why}")
    return Source("rapl", what, devices)


@dataclass
class _State:
    """A device's running total, and how many times its reading broke (a window spanning a break has no figure)."""

    last_raw: float | None = None
    total_j: float = 0.0
    epoch: int = 0
    error: str | None = None  # the last read's error; None when it read
    errors: list[str] = field(default_factory=list)  # the reason of each break, by epoch


@dataclass(frozen=True)
class DeviceMark:
    total_j: float
    epoch: int
    error: str | None


@dataclass(frozen=True)
class Mark:
    t: float
    devices: dict[str, DeviceMark]


class DeviceJoules(Strict):
    device: str
    joules: float | None
    unreadable: str | None = Field(None, description="why there is no figure for this window")


class MeterWindow(Strict):
    """One meter over one window: its devices, their sum and the sum per output token, or why there is none."""

    meter: Literal["nvml", "rapl"]
    what: str
    joules: float | None = Field(description="sum over the devices; None when any device has no figure")
    j_per_output_token: float | None
    devices: list[DeviceJoules]
    unreadable: str | None = Field(None, description="absent meter, or the first device without a figure, and why")


class Energy(Strict):
    """The joules of one measured window (a bench cell, a capacity point), by meter, and per output token."""

    window_s: float
    output_tokens: int = Field(description="tokens generated in the window (every measured request's count)")
    meters: list[MeterWindow]

    def figure(self) -> MeterWindow | None:
        """The meter a J/token figure is shown for: the GPUs when they read, else the CPU packages."""
        for name in ("nvml", "rapl"):
            for m in self.meters:
                if m.meter == name and m.joules is not None:
                    return m
        return None

    def sentence(self) -> str:
        parts = []
        for m in self.meters:
            if m.joules is None:
                parts.append(f"{m.meter}: unreadable ({m.unreadable})")
            else:
                per = "" if m.j_per_output_token is None else f", {m.j_per_output_token:.4g} J/output token"
                parts.append(f"{m.meter} {', '.join(d.device for d in m.devices)}: {m.joules:,.1f} J{per}")
        return f"{self.window_s:.1f} s, {self.output_tokens:,} output tokens; " + "; ".join(parts)


def meter_window(meter: Literal["nvml", "rapl"], what: str, devices: list[DeviceJoules], absent: str | None,
                 output_tokens: int) -> MeterWindow:
    """A meter's figures from its devices' joules: their sum, and per output token; none if any device has none."""
    if absent is not None:
        return MeterWindow(meter=meter, what=what, joules=None, j_per_output_token=None, devices=[], unreadable=absent)
    broken = next((d for d in devices if d.joules is None), None)
    joules = None if broken else round(sum(d.joules or 0.0 for d in devices), 3)
    per = joules / output_tokens if joules is not None and output_tokens > 0 else None
    return MeterWindow(meter=meter, what=what, joules=joules, j_per_output_token=None if per is None else round(per, 6),
                       devices=devices, unreadable=f"{broken.device}: {broken.unreadable}" if broken else None)


def recomputed(e: Energy, output_tokens: int) -> Energy:
    """The same device readings with every derived figure computed again, for `servepack verify`."""
    meters = [meter_window(m.meter, m.what, m.devices, None if m.devices else m.unreadable, output_tokens)
              for m in e.meters]
    return Energy(window_s=e.window_s, output_tokens=output_tokens, meters=meters)


class EnergyMeter:
    """Every meter's devices, read on a thread every `poll_s` and at each `mark()`; thread-safe."""

    def __init__(self, sources: Sequence[Source] | None = None, *, poll_s: float = POLL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sources = list(sources) if sources is not None else [nvml_source(), rapl_source()]
        self.poll_s, self.clock = poll_s, clock
        self._state = {d.label: _State() for s in self.sources for d in s.devices}
        self._lock = threading.Lock()
        # The polling thread: Ticker's stop() waits for it to end, through a Ctrl-C too (a bare join would not).
        self._ticker = Ticker("servepack-energy", poll_s, self.poll, quiet=True)

    def _read(self, d: Device) -> None:
        st = self._state[d.label]
        try:
            raw = d.read_j()
        except Unread as exc:
            if st.error is None:  # a new break: windows that span it have no figure
                st.epoch += 1
                st.errors.append(str(exc))
            st.error, st.last_raw = str(exc), None
            return
        if st.last_raw is not None:
            delta = raw - st.last_raw
            if delta < 0 and d.wrap_j is not None:
                delta += d.wrap_j
            if delta < 0:  # a counter that went back without a known range: no figure rather than a wrong one
                st.epoch += 1
                st.errors.append(f"counter went back by {-delta:,.3f} J with no known range to wrap at")
                st.error, st.last_raw = st.errors[-1], raw
                return
            st.total_j += delta
        st.last_raw, st.error = raw, None

    def poll(self) -> None:
        with self._lock:
            for s in self.sources:
                for d in s.devices:
                    self._read(d)

    def mark(self) -> Mark:
        """Read every counter now."""
        with self._lock:
            for s in self.sources:
                for d in s.devices:
                    self._read(d)
            return Mark(self.clock(), {k: DeviceMark(v.total_j, v.epoch, v.error) for k, v in self._state.items()})

    def window(self, a: Mark, b: Mark, output_tokens: int) -> Energy:
        """The joules between two marks, by meter, and per output token."""
        meters = [meter_window(s.meter, s.what, [self._device_window(d.label, a, b) for d in s.devices], s.absent,
                               output_tokens) for s in self.sources]
        return Energy(window_s=round(b.t - a.t, 3), output_tokens=output_tokens, meters=meters)

    def _device_window(self, label: str, a: Mark, b: Mark) -> DeviceJoules:
        da, db = a.devices[label], b.devices[label]
        for end, dm in (("start", da), ("end", db)):
            if dm.error is not None:
                return DeviceJoules(device=label, joules=None, unreadable=f"unreadable at the window's {end}: "
                                                                          f"{dm.error}")
        if da.epoch != db.epoch:
            why = self._state[label].errors[db.epoch - 1]
            return DeviceJoules(device=label, joules=None, unreadable=f"errored during the window: {why}")
        return DeviceJoules(device=label, joules=round(db.total_j - da.total_j, 3))

    def start(self) -> EnergyMeter:
        self.poll()
        if any(s.devices for s in self.sources):
            self._ticker.start()
        return self

    def stop(self) -> None:
        self._ticker.stop()

    def __enter__(self) -> EnergyMeter:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def energy_note(windows: Sequence[Energy], what: str) -> str:
    """One line for a receipt's notes: each meter's joules and J/output token over every window, or why none."""
    if not windows:
        return f"energy: no measured {what}"
    tokens = sum(w.output_tokens for w in windows)
    parts = []
    for m in windows[0].meters:
        mine = [x for w in windows for x in w.meters if x.meter == m.meter]
        missing = [x for x in mine if x.joules is None]
        if missing:
            why = missing[0].unreadable
            parts.append(f"{m.meter} unreadable in {len(missing)}/{len(mine)} {what} ({why})")
            continue
        joules = sum(x.joules or 0.0 for x in mine)
        per = f", {joules / tokens:.4g} J/output token" if tokens else ""
        devices = ", ".join(d.device for d in m.devices)
        parts.append(f"{m.meter} [{devices}] {joules:,.1f} J over {len(mine)} {what}{per}")
    return "energy: " + "; ".join(parts)
