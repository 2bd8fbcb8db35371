"""Launch llama-server from a preset, wait for health, and always tear it down."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from servepack.engine.environ import server_env
from servepack.engine.serverlog import LogWatch
from servepack.errors import EngineError, ServerDied
from servepack.packs.schema import FlagValue, Preset
from servepack.safepath import replace_bytes

LOOPBACK = "127.0.0.1"
_LIVE: weakref.WeakSet[Server] = weakref.WeakSet()
PR_SET_PDEATHSIG = 1
# A stamp beside the server's log (`.server.pid.json` for server.log): who started which process, when. Dot-named,
# so no receipt covers it; removed when the server is stopped. A stamp left behind means servepack was killed.
STAMP_SUFFIX = ".pid.json"
STAMP_SCHEMA = "servepack.server_stamp/v1"
SERVERS_INDEX = "servers"  # under the cache: a stamp per running server, so a later run finds what a killed one left
FATAL_GRACE_S = 2.0  # a server that logged a fatal line and still runs after this is stopped, the line quoted


def preset_args(flags: Mapping[str, FlagValue]) -> list[str]:
    """llama-server arguments from a preset's flags, by their own names: true → bare flag, false → omitted."""
    args: list[str] = []
    for name, value in flags.items():
        flag = f"--{name}" if len(name) > 1 else f"-{name}"
        if value is True:
            args.append(flag)
        elif value is False:
            continue
        else:
            args += [flag, str(value)]
    return args


def build_argv(
    binary: Path,
    model: Path,
    preset: Preset,
    *,
    host: str,
    port: int,
    extra_files: Mapping[str, Path] | None = None,
) -> list[str]:
    """The full argv, recorded as a token list exactly as executed.

    servepack's own `--host` and `--port` come after the preset's flags: llama-server keeps the last value of a flag,
    so nothing in a preset (a model preset's own port, say) can move them (`flag_policy.OWNED` refuses the flags it
    knows before this)."""
    argv = [str(binary), "--model", str(model)]
    for name in preset.requires:
        path = (extra_files or {}).get(name)
        if path is None:
            raise EngineError(f"preset needs the extra file {name!r}; pull it with `servepack pull PACK --with-draft`")
        argv += ["--model-draft", str(path)]
    return [*argv, *preset_args(preset.flags), "--host", host, "--port", str(port)]


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def ensure_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As llama-server binds (SO_REUSEADDR): a listener still refuses the bind, a previous server's closed
        # connections (TIME_WAIT, a minute after a restart on the same port) do not.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise EngineError(f"port {port} on {host} is already in use; pass another --port or omit it") from None
            raise EngineError(f"cannot bind {host}:{port} ({exc.strerror}); check --host/--port") from None


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stat_fields(pid: int) -> list[bytes]:
    """/proc/PID/stat from field 3 (state) on; empty when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return []
    return raw[raw.rfind(b")") + 2:].split()


def proc_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the pid, its identity.
    None for no process, and for a zombie (it has exited; only its parent has not collected it)."""
    fields = _stat_fields(pid)
    if not fields or fields[0] == b"Z":
        return None
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def group_members(pgid: int) -> list[int]:
    """Every live process in process group `pgid` (the leader included), from /proc; empty where there is none."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            # fields: state, ppid, pgrp, ...; a zombie has exited already
            if len(fields) > 2 and fields[0] != b"Z" and fields[2] == str(pgid).encode():
                found.append(int(entry.name))
    return sorted(found)


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get SIGKILL when servepack dies, even by SIGKILL (Linux PR_SET_PDEATHSIG).

    The signal follows the thread that forked, so it is only armed from the main thread, which lives as long as
    servepack does. If servepack died between fork and prctl, the child exits at once.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arm


def stamp_path(log_path: Path) -> Path:
    return log_path.with_name(f".{log_path.stem}{STAMP_SUFFIX}")


@dataclass(eq=False)
class Server:
    """A running llama-server owned by this process."""

    argv: list[str]
    base_url: str
    model: str
    log_path: Path
    process: subprocess.Popen[bytes]
    started_at: float = field(default_factory=time.time)
    ready_s: float | None = None
    stamps: list[Path] = field(default_factory=list)
    name: str = "llama-server"  # what messages call it: an RPC worker is named by its address

    def write_stamps(self, index_dir: Path | None) -> None:
        """Record pid, start time and owner beside the log (and in `index_dir`), so a later servepack can prove
        a server left running after this one was killed is its own, and stop it. Best effort: never fatal."""
        record = {
            "schema_version": STAMP_SCHEMA, "pid": self.pid, "pgid": self.pid,
            "start_ticks": proc_start_ticks(self.pid), "boot_id": boot_id(), "owner_pid": os.getpid(),
            "owner_start_ticks": proc_start_ticks(os.getpid()), "argv0": self.argv[0], "base_url": self.base_url,
            "log": str(self.log_path), "started_at": self.started_at,
            "stamp": str(stamp_path(self.log_path).absolute()),
        }
        data = json.dumps(record, indent=2).encode()
        targets = [stamp_path(self.log_path)]
        if index_dir is not None:
            targets.append(index_dir / f"{self.pid}-{record['start_ticks']}{STAMP_SUFFIX}")
        for target in targets:
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                replace_bytes(target, data)
                self.stamps.append(target)
            except OSError:
                continue

    def remove_stamps(self) -> None:
        for target in self.stamps:
            with contextlib.suppress(OSError):
                target.unlink()
        self.stamps.clear()

    @property
    def pid(self) -> int:
        return self.process.pid

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def check_alive(self) -> None:
        """Raise ServerDied, with the log's last lines, if the process has exited."""
        code = self.process.poll()
        if code is not None:
            raise ServerDied(
                f"{self.name} (pid {self.pid}) exited with code {code} during the run; "
                f"partial results kept; log {self.log_path}: {tail(self.log_path, 3)!r}"
            )

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM the process group, then SIGKILL after `grace_s`. Idempotent."""
        proc = self.process
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        # Children of the group that outlived the leader (none expected from llama-server) go too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        self.remove_stamps()
        _LIVE.discard(self)
        return proc.returncode


def wait_healthy(server: Server, deadline_s: float, progress: Callable[[str], None] | None = None,
                 log: LogWatch | None = None) -> None:
    """Poll /health until 200 while the process lives; on failure raise with the log's tail.

    With `log`, each poll reads the log's new lines first: a server that listens elsewhere or logged a fatal error
    fails at once, the line quoted (`engine.serverlog`)."""
    start = time.monotonic()
    last = ""
    with httpx.Client(timeout=5.0) as client:
        while True:
            if log is not None and (said := log.problem()) is not None:
                if log.fatal:  # on its way out: its exit code and log tail say the most, when it exits soon
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        server.process.wait(FATAL_GRACE_S)
                if server.is_alive():
                    raise EngineError(f"{server.name} (pid {server.pid}) {said}; stopped it; log {server.log_path}")
            if not server.is_alive():
                raise EngineError(
                    f"{server.name} exited with code {server.process.returncode} before it was healthy; "
                    f"log {server.log_path}:\n{tail(server.log_path)}"
                )
            try:
                r = client.get(f"{server.base_url}/health")
                if r.status_code == 200:
                    server.ready_s = time.monotonic() - start
                    return
                last = f"HTTP {r.status_code}"
            except httpx.TransportError as exc:
                last = type(exc).__name__
            if time.monotonic() - start > deadline_s:
                raise EngineError(
                    f"{server.name} not healthy after {deadline_s:.0f} s ({last}); raise "
                    f"SERVEPACK_HEALTH_TIMEOUT_S or check the log {server.log_path}:\n{tail(server.log_path)}"
                )
            time.sleep(0.2)


@contextlib.contextmanager
def launch(
    argv: list[str],
    *,
    host: str,
    port: int,
    model_alias: str,
    log_path: Path,
    health_timeout_s: float,
    env: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
    index_dir: Path | None = None,
    name: str = "llama-server",
) -> Iterator[Server]:
    """Start llama-server, wait for /health, yield it, and stop it on every exit path.

    `env` is the process's whole environment; None gives it the allow-listed one (`engine.environ.server_env`),
    never servepack's own, which may hold LLAMA_ARG_* variables and secrets.

    The server dies with servepack even when servepack is SIGKILLed (PR_SET_PDEATHSIG), and a stamp beside its
    log (and in `index_dir`) lets the next servepack command find and stop what a killed one left behind.
    """
    ensure_port_free(host, port)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    watch = LogWatch(log_path, host, port)
    with log_path.open("ab") as log:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so teardown reaches every child
                env=dict(env) if env is not None else server_env("native").env,
                preexec_fn=die_with_parent(),  # only prctl and getppid run in the child
            )
        except OSError as exc:
            raise EngineError(f"cannot start {argv[0]} ({exc.strerror}); check --server-bin") from None
    server = Server(argv=argv, base_url=f"http://{host}:{port}", model=model_alias, log_path=log_path, process=proc,
                    name=name)
    try:
        _LIVE.add(server)
        server.write_stamps(index_dir)
        if progress:
            progress(f"{name} pid {proc.pid} on {server.base_url}; waiting for /health")
        wait_healthy(server, health_timeout_s, progress, watch)
        yield server
    finally:
        server.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_stamp(path: Path) -> dict[str, Any] | None:
    try:
        if path.is_symlink() or path.stat().st_size > 1 << 16:
            return None
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("schema_version") != STAMP_SCHEMA:
        return None
    if not all(isinstance(doc.get(k), int) and doc[k] > 1 for k in ("pid", "pgid", "owner_pid")):
        return None
    return doc


def stale_owner_gone(doc: dict[str, Any]) -> bool:
    """The servepack that wrote the stamp is gone (dead, or its pid now belongs to another process)."""
    ticks = proc_start_ticks(int(doc["owner_pid"]))
    return ticks is None or ticks != doc.get("owner_start_ticks")


def _ours(doc: dict[str, Any]) -> str | None:
    """Why the stamp's process group is provably the server servepack started, or None if it cannot be proven.

    Proven when the leader is alive with the recorded start time on the same boot, or when the leader is gone but
    its group still has members: a group id is not reused while any member lives, so they are its children.
    """
    if doc.get("boot_id") != boot_id():
        return None
    pid, pgid = int(doc["pid"]), int(doc["pgid"])
    ticks = proc_start_ticks(pid)
    if ticks is not None:
        try:
            same_group = os.getpgid(pid) == pgid
        except OSError:
            same_group = False
        if ticks == doc.get("start_ticks") and same_group:
            return f"pid {pid} with the recorded start time"
        return None
    if _group_alive(pgid):
        return f"children of pid {pid} in its process group {pgid}"
    return None


def reap_stale(stamps: Iterable[Path], grace_s: float = 5.0) -> list[str]:
    """Stop servers a killed servepack left running, proven by their stamps; one line per server, for the user.

    A stamp whose owner is still alive belongs to a concurrent run and is left alone; a stamp whose server is
    gone (or cannot be proven ours) is removed without touching any process.
    """
    said = []
    for path in sorted(set(stamps)):
        doc = _read_stamp(path)
        if doc is None or not stale_owner_gone(doc):
            continue
        why = _ours(doc)
        if why is not None:
            pgid = int(doc["pgid"])
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            said.append(f"stopped a server left running by a servepack that was killed (pid {doc['owner_pid']}): "
                        f"{doc.get('argv0')} ({why}), log {doc.get('log')}; that run has no receipt")
        with contextlib.suppress(OSError):
            path.unlink()
        _remove_twin(doc)
    return said


def _remove_twin(doc: dict[str, Any]) -> None:
    """The other copy of a stamp (the run directory's, named by the index's), when it is the same record."""
    twin = doc.get("stamp")
    if not isinstance(twin, str) or not twin.endswith(STAMP_SUFFIX):
        return
    other = _read_stamp(Path(twin))
    if other is not None and all(other.get(k) == doc.get(k) for k in ("pid", "start_ticks", "owner_pid", "boot_id")):
        with contextlib.suppress(OSError):
            Path(twin).unlink()


def stop_all() -> None:
    """Stop every server this process started; a last safety net at interpreter exit."""
    for server in list(_LIVE):
        server.stop(grace_s=5.0)


atexit.register(stop_all)
