"""servepack's CPU meter: one window's cost, servepack's own CPU time beside the server's."""

from __future__ import annotations

import os

from servepack.bench.observer import CpuMeter
from servepack.host.contention import ProcTick


def test_the_cpu_meter_counts_servepacks_other_processes_in_its_own_time_and_the_ratio() -> None:
    """One meter for a bench run, a probe and a point spread over client workers: the workers' CPU-seconds are
    servepack's. Wrong answer: this process's time alone (about 0 here), and the ratio from it."""
    class Server:
        ticks = 0

        def processes(self) -> dict[int, ProcTick]:
            return {4242: ProcTick(ppid=1, ticks=self.ticks, start=7, name="llama-server")}

    server = Server()
    meter = CpuMeter([4242], reader=server).start()  # type: ignore[arg-type]
    server.ticks = 4 * (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)  # 4 CPU-s of the server
    cost = meter.stop(others_cpu_s=2.0)
    assert 2.0 <= cost.client_cpu_s < 2.5 and cost.server_cpu_s == 4.0
    assert cost.ratio is not None and 0.5 <= cost.ratio < 0.625
