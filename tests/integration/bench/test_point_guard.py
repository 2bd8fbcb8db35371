"""A memory guard that trips ends a running capacity point at once (the one point driver, `load_shapes.drive`, asks
the sampler while the point runs; a spread point's parent asks it as it waits for its workers), not when its
duration or its requests end."""

from __future__ import annotations

from pathlib import Path

import pytest

from servepack.bench.capacity import parse_slo
from servepack.bench.load import LoadSettings
from servepack.bench.sweep import run_capacity
from servepack.engine.attach import attach
from servepack.host.memory import MemorySampler
from servepack.packs.schema import Guards
from servepack.store import ResultsDir
from servepack.testing import Script, ScriptedServer


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "spread"])
def test_a_tripped_guard_cuts_the_running_point_and_keeps_the_record(tmp_path: Path, workers: int) -> None:
    # Each request takes ~4 s (200 tokens × 20 ms); the point may run 30 s. The guard's threshold is more than any
    # host has, so it trips on the sampler's first reading: the point must end before a request could finish. A
    # point spread over client workers is stopped the same way (its workers told to stop, as on Ctrl-C).
    settings = LoadSettings(prompt_tokens=30, gen_tokens=200, max_requests=40, duration_s=30.0, timeout_s=60.0,
                            workers=workers)
    results = ResultsDir(tmp_path / "r")
    with ScriptedServer(Script(queue=True, slots=4, ttft_s=0.05, itl_s=0.02)) as srv, \
            MemorySampler(None, guards=Guards(min_available_ram_gb=1e6)) as sampler:
        r = run_capacity(attach(srv.base_url, "m"), settings, [parse_slo("ttft_p90=10s")], results, max_level=2,
                         sampler=sampler, knee_probe=False)
    assert sampler.tripped is not None and sampler.tripped.guard == "min_available_ram_gb"
    assert r.status == "partial" and r.stopped_reason and "min_available_ram_gb" in r.stopped_reason
    assert len(r.points) == 1, [p.level for p in r.points]  # the sweep stops after the cut point
    p = r.points[0]
    assert p.stopped is not None and "min_available_ram_gb" in p.stopped
    assert p.n_ok == 0, p.n_ok  # cut before any 4 s request could end (the old runner ran them all: n_ok ≥ 7)
    assert r.knee.level is None and r.limit.kind == "none"  # a cut point is judged by nothing
    # the verdict names the guard in the point's own words
    assert f"memory {p.stopped}" in r.limit.reason and p.stopped.startswith("guard min_available_ram_gb: "), \
        (r.limit.reason, p.stopped)
    assert (tmp_path / "r" / "capacity.json").is_file()
