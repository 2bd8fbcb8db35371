"""Launch llama-server from a preset, wait for health, and always tear it down."""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import signal
import socket
import subprocess
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from servepack.errors import EngineError, ServerDied
from servepack.packs.schema import FlagValue, Preset

LOOPBACK = "127.0.0.1"
_LIVE: weakref.WeakSet[Server] = weakref.WeakSet()


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
    """The full argv, recorded as a token list exactly as executed."""
    argv = [str(binary), "--model", str(model), "--host", host, "--port", str(port)]
    for name in preset.requires:
        path = (extra_files or {}).get(name)
        if path is None:
            raise EngineError(f"preset needs the extra file {name!r}; pull it with `servepack pull PACK --with-draft`")
        argv += ["--model-draft", str(path)]
    return argv + preset_args(preset.flags)


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def ensure_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
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
                f"llama-server (pid {self.pid}) exited with code {code} during the run; "
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
        _LIVE.discard(self)
        return proc.returncode


def wait_healthy(server: Server, deadline_s: float, progress: Callable[[str], None] | None = None) -> None:
    """Poll /health until 200 while the process lives; on failure raise with the log's tail."""
    start = time.monotonic()
    last = ""
    with httpx.Client(timeout=5.0) as client:
        while True:
            if not server.is_alive():
                raise EngineError(
                    f"llama-server exited with code {server.process.returncode} before it was healthy; "
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
                    f"llama-server not healthy after {deadline_s:.0f} s ({last}); raise "
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
) -> Iterator[Server]:
    """Start llama-server, wait for /health, yield it, and stop it on every exit path."""
    ensure_port_free(host, port)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so teardown reaches every child
                env=dict(env) if env is not None else None,
            )
        except OSError as exc:
            raise EngineError(f"cannot start {argv[0]} ({exc.strerror}); check --server-bin") from None
    server = Server(argv=argv, base_url=f"http://{host}:{port}", model=model_alias, log_path=log_path, process=proc)
    try:
        _LIVE.add(server)
        if progress:
            progress(f"llama-server pid {proc.pid} on {server.base_url}; waiting for /health")
        wait_healthy(server, health_timeout_s, progress)
        yield server
    finally:
        server.stop()


def stop_all() -> None:
    """Stop every server this process started; a last safety net at interpreter exit."""
    for server in list(_LIVE):
        server.stop(grace_s=5.0)


atexit.register(stop_all)
