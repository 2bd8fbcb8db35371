"""Is the server alive and working? The one check behind every stream's stall bound, a bench cell's or a capacity
point's (`ServerCheck.probe`, what `client.StallBound.probe` calls), and, after a stall, the waits before the next
request goes (`await_server`: until it answers /health again; `await_idle`: until the engine's own check finds it at
rest, `Endpoint.at_rest`, the one a capacity sweep waits on before a point).

A probe asks whether a server that has sent nothing past the stall floor is working: its processes must still run
(`Endpoint.check_alive`, for a server servepack launched), and it must answer /health or use CPU meanwhile
(`observer.CpuMeter` over the wait). Streams that reach the floor together share one probe.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx

from servepack.bench.observer import CpuMeter
from servepack.engine.base import Endpoint
from servepack.errors import ServerDied

WORKING_CORES = 0.1  # a server using this much CPU over the check is working, whatever /health says
HEALTH_SLOW_S = 0.5  # a /health answer slower than this after a stall: the whole server had stopped
HEALTH_CHECK_S = 2.0  # the server check past the stall floor waits this long (at most half the floor) for /health


def _never() -> bool:
    return False


class ServerCheck:
    """The server's liveness, asked on `client` (an httpx client for the GETs; the load goes out on `WireClient`).

    `server_pids`: its processes on this host, whose CPU time the probe reads (none: /health alone decides).
    `stopped`: the caller's stop (a guard tripped): the waits end early once it says so. Use it as an async context
    manager: a probe still running at the end is cancelled before `client` closes.
    """

    def __init__(self, endpoint: Endpoint, client: httpx.AsyncClient, floor_s: float, *,
                 server_pids: list[int] | None = None, stopped: Callable[[], bool] = _never) -> None:
        self.endpoint, self.client, self.floor_s = endpoint, client, floor_s
        self.base_url = endpoint.base_url.rstrip("/")
        self.server_pids = list(server_pids or [])
        self.stopped = stopped
        self._pending: asyncio.Future[str | None] | None = None

    async def __aenter__(self) -> ServerCheck:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()
            await asyncio.gather(self._pending, return_exceptions=True)

    async def probe(self) -> str | None:
        """Is the server working on a request that has sent nothing past the stall floor? None when it is, else
        what it failed. A probe already running (another stream past the floor) is shared, not asked again; one
        caller cancelled (its stream cut) leaves it running for the others."""
        if self._pending is None or self._pending.done():
            self._pending = asyncio.ensure_future(self._probe())
        return await asyncio.shield(self._pending)

    async def _probe(self) -> str | None:
        # An attached server's check_alive is itself a blocking HTTP request: only a launched one's is asked here.
        if self.endpoint.launched:
            try:
                self.endpoint.check_alive()
            except ServerDied as exc:
                return f"server exited ({str(exc).splitlines()[0][:160]})"
        wait = min(HEALTH_CHECK_S, self.floor_s / 2)
        meter = CpuMeter(self.server_pids).start()
        try:
            r = await self.client.get(f"{self.base_url}/health", timeout=wait)
            answered: str | None = f"HTTP {r.status_code}"
        except httpx.HTTPError:
            answered = None
        cost = meter.stop()
        cpu = cost.server_cpu_s
        # working: a tenth of a core at least (a stopped server uses none; one reading a prompt, a core or more)
        if answered is not None or (cpu is not None and cpu >= WORKING_CORES * max(cost.wall_s, wait)):
            return None
        used = f"server CPU {cpu:.2f} s meanwhile" if cpu is not None else "the server's CPU time is not known here"
        return f"/health unanswered within {wait:g} s, {used}"

    async def await_server(self, until: float) -> tuple[float, bool]:
        """After a stall: wait (to monotonic `until` at most) for the server to answer /health again, so the
        next request is not sent into the same stop. Returns (seconds waited, answered)."""
        t0 = time.monotonic()
        stopped = False
        while time.monotonic() < until and not self.stopped():
            t_ask = time.monotonic()
            try:
                await self.client.get(f"{self.base_url}/health", timeout=max(0.1, min(2.0, until - time.monotonic())))
            except httpx.HTTPError:
                stopped = True  # the whole server stopped answering, not one request
                await asyncio.sleep(0.2)
                continue
            if stopped or time.monotonic() - t_ask > HEALTH_SLOW_S:
                await self.await_idle(until)
            return time.monotonic() - t0, True
        return time.monotonic() - t0, False

    async def await_idle(self, until: float) -> None:
        """Once a stopped server runs again it finishes the request that was cut (llama-server notices the closed
        connection only when it next sends): wait until the engine's check (llama-server's /slots and /metrics)
        finds it at rest, so the replacement does not queue behind it (a 2,048-token prompt measured 22 s instead
        of 10 s without this); not at all where it cannot tell. Not after a stall of one request on a server that
        kept answering: that request may never end."""
        while time.monotonic() < until and not self.stopped():
            rest = await asyncio.to_thread(self.endpoint.at_rest)  # blocking HTTP, off the event loop
            if rest.at_rest is not False:
                return
            await asyncio.sleep(0.2)
