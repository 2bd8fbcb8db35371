"""A client worker process of a point spread over `--client-workers`: its job (`WorkerJob`: its streams or
arrivals, their prompts and bodies, built in the parent), its main (`worker_main`: run its share, send back what it
sent, or the error), its share of the point (`_Worker._work`: every worker starts on one wall-clock instant and stops
early on "stop" from the parent or the parent gone), and how the parent reads a worker's pipe and exit (`receive`,
`how_ended`). The parent's side (starting, collecting, stopping) is `LoadRunner._spread` in bench/load.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from servepack.bench.load_settings import LoadSettings
from servepack.bench.load_shapes import LoadSender, PointState, SentRequest
from servepack.bench.prompts import BuiltPrompt, EstimateTokenizer
from servepack.bench.shapes import shape_for
from servepack.bench.shapes.base import PointPlan
from servepack.bench.wire import WireClient
from servepack.engine.base import Endpoint


class _Worker(LoadSender):
    """What a client worker process runs: the sending half of the runner, and its share of a point."""

    async def _work(self, job: WorkerJob, conn: Connection) -> tuple[list[SentRequest], int, int, float]:
        """One worker's share of a point (in its own process). "stop" from the parent (Ctrl-C, another worker
        died), or the parent gone, ends it early: in-flight requests are cancelled, the finished ones sent back."""
        s = self.s
        async with WireClient(self.base_url, connect_timeout_s=min(s.timeout_s, 10.0)) as wire:
            await wire.warm(job.width)
            conn.send("ready")
            t0_unix = await asyncio.to_thread(conn.recv)
            cpu0 = time.process_time()
            loop = asyncio.get_running_loop()
            halt = asyncio.Event()

            def heard() -> None:
                with contextlib.suppress(EOFError, OSError):
                    conn.recv()
                loop.remove_reader(conn.fileno())
                halt.set()

            loop.add_reader(conn.fileno(), heard)
            delay = t0_unix - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            t0 = time.perf_counter() - (time.time() - t0_unix)  # the shared instant on this process's clock
            p = PointState(t0=t0, deadline=t0 + s.duration_s, budget=job.budget, t0_unix=t0_unix)
            plan = PointPlan(prompts=list(job.prompts), bodies=list(job.bodies), offsets=job.offsets, ids=job.ids)
            load = asyncio.ensure_future(shape_for(s.shape).send(self, None, wire, p, job.level, plan))
            stop = asyncio.ensure_future(halt.wait())
            try:
                await asyncio.wait({load, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (load, stop):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(conn.fileno())
            return p.sent, p.used, p.issued, time.process_time() - cpu0


@dataclass
class WorkerJob:
    """One client worker's share of a point (pickled to its process)."""

    base_url: str
    model: str
    settings: LoadSettings
    llama: bool
    ignore_eos: bool
    level: int
    ids: list[int]
    offsets: list[float]
    prompts: list[BuiltPrompt]
    bodies: list[bytes]
    budget: int
    width: int


WorkerResult = tuple[list[SentRequest], int, int, float, str | None]


def receive(pipe: Connection) -> Any:
    """The next message on a worker's pipe, or None at its end (the worker exited or died)."""
    try:
        return pipe.recv() if pipe.poll(0) else None
    except (EOFError, OSError):
        return None


def how_ended(proc: Any) -> str:
    """How a worker process ended, for the line that says so ("" while it runs)."""
    code = proc.exitcode
    if code is None:
        return ""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f" (killed by {signal.Signals(-code).name})"
        return f" (killed by signal {-code})"
    return f" (exit code {code})"


def worker_main(job: WorkerJob, conn: Connection) -> None:
    """A client worker process: send its share, send back what it sent. Ctrl-C is the parent's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        # Prompts come built; one that runs short is built here by estimate (and flagged not sized exactly).
        runner = _Worker(Endpoint(base_url=job.base_url, model=job.model, launched=False), job.settings,
                         EstimateTokenizer(), llama=job.llama, ignore_eos=job.ignore_eos)
        sent, used, issued, cpu = asyncio.run(runner._work(job, conn))
        with contextlib.suppress(OSError):  # the parent may be gone: nobody to tell
            conn.send((sent, used, issued, cpu, None))
    except Exception as exc:  # reported to the parent, which says it and keeps the other workers' requests
        with contextlib.suppress(OSError):
            conn.send(([], 0, 0, 0.0, f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()
