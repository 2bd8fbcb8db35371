"""llama.cpp RPC: `servepack worker` (an rpc-server in the foreground that serves its own fingerprint) and the
head's side of a topology (reachability, worker identity, the same RPC protocol, liveness during the run).

llama.cpp's RPC is unauthenticated: whoever reaches an rpc-server's port can allocate memory and run graphs on its
devices. A worker binds loopback unless told otherwise with an explicit opt-in, and a pack must opt in for any
worker off loopback.

A worker serves, on the same address and its port + 1, `GET /fingerprint` (a `WorkerInfo`: the host fingerprint,
rpc-server's argv, binary hash and RPC protocol) and `GET /health` (200 while its rpc-server lives). The head reads
both: the fingerprint before loading (recorded in the receipt), the health between requests (a dead worker ends
the run with ServerDied naming it).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import pty
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import httpx
from pydantic import Field, ValidationError

from servepack import __version__
from servepack.engine.build import cached_build, pinned_build_dir
from servepack.engine.buildrecord import read_build_record
from servepack.engine.environ import server_env
from servepack.errors import EngineError, ServerDied, UsageError
from servepack.host.fingerprint import HostFingerprint, fingerprint
from servepack.packs import LoadedPack
from servepack.packs.schema import RPC_OPT_IN, RpcWorker, Topology, host_is_loopback, rpc_address, worker_host
from servepack.settings import BINARY_ENV, Settings
from servepack.strict import Strict
from servepack.weights.resolve import sha256_file

WORKER_SCHEMA = "servepack.rpc-worker/v1"
RPC_SERVER_ENV = BINARY_ENV["rpc-server"]
OPT_IN_FLAG = "--" + RPC_OPT_IN.replace("_", "-")
_PROTO_LINE = re.compile(r"Starting RPC server v(\d+\.\d+\.\d+)")
Say = Callable[[str], None]


class RpcServerFacts(Strict):
    path: str
    sha256: str
    argv: list[str]
    pid: int | None
    protocol: str | None = Field(description="the RPC protocol it announced (`Starting RPC server vX.Y.Z`)")


class WorkerInfo(Strict):
    """What a worker serves on GET /fingerprint: who it is and what it runs."""

    schema_version: str = WORKER_SCHEMA
    servepack_version: str
    endpoint: str = Field(description="host:port of its rpc-server, as bound")
    host: HostFingerprint
    rpc_server: RpcServerFacts
    started_at: float


def fingerprint_port(port: int) -> int:
    return port + 1



def locate_rpc_server(head_binary: Path | None, override: Path | None = None) -> Path:
    """rpc-server: --rpc-server, then SERVEPACK_RPC_SERVER, then the one built with the head (its build record).

    Head and workers must speak one RPC protocol; the build beside the head is the one made with it.
    """
    from_env = Settings.load().binary_from_env("rpc-server")
    if override is not None:
        path, how = override.expanduser(), "--rpc-server"
    elif from_env is not None:
        path, how = Path(from_env).expanduser(), RPC_SERVER_ENV
    else:
        record = read_build_record(head_binary) if head_binary is not None else None
        built = record.binaries.get("rpc-server") if record is not None else None
        if built is None:
            raise EngineError(
                f"no rpc-server: the head llama-server {head_binary or '(none)'} has no RPC build beside it; build "
                f"one with `servepack engine build --from-pin --rpc` (or `make rpc-engine`) and pass its "
                f"llama-server as --server-bin, or set {RPC_SERVER_ENV}")
        path, how = Path(built.path), "the head's build record"
    if not path.is_file() or not os.access(path, os.X_OK):
        raise EngineError(f"rpc-server {path} (from {how}) does not exist or is not executable; fix the path")
    return path.resolve()


def worker_rpc_server(override: Path | None, loaded: LoadedPack, cache_dir: Path) -> Path:
    """The worker's rpc-server: --rpc-server, then SERVEPACK_RPC_SERVER, then the pack's pinned RPC build."""
    if override is not None or Settings.load().binary_from_env("rpc-server") is not None:
        return locate_rpc_server(None, override)
    out = pinned_build_dir(loaded, cache_dir, rpc=True) / "build"
    built = cached_build(out)
    if built is None or "rpc-server" not in built.binaries:
        raise EngineError(f"no rpc-server built for pack {loaded.pack.id} in {out}: run `servepack engine build "
                          f"--from-pin --rpc` (or `make rpc-engine`), or pass --rpc-server PATH")
    return built.binaries["rpc-server"].resolve()


def rpc_head(loaded: LoadedPack, override: Path | None, cache_dir: Path) -> Path | None:
    """The head llama-server for a topology: --server-bin or SERVEPACK_LLAMA_SERVER when given, else the pack's
    pinned RPC build (the pinned package is built without RPC); an EngineError when there is none."""
    if override is not None or Settings.load().binary_from_env("llama-server") is not None:
        return override
    pin = loaded.pack.engine
    if not (pin.package and pin.package_version):
        return None  # pinned by commit: the user builds it (`servepack engine build --rpc`) and names it
    out = pinned_build_dir(loaded, cache_dir, rpc=True) / "build"
    built = cached_build(out)
    if built is None or "llama-server" not in built.binaries:
        raise EngineError(f"pack {loaded.pack.id}: an RPC split needs llama-server built with -DGGML_RPC=ON and the "
                          "pinned package is not; run `servepack engine build --from-pin --rpc` (or `make rpc-engine`) "
                          "or pass --server-bin")
    return built.binaries["llama-server"]


def head_rpc_protocol(head_binary: Path | None) -> str | None:
    """The RPC protocol the head was built with, from its servepack build record; None when not known."""
    record = read_build_record(head_binary) if head_binary is not None else None
    return record.rpc_protocol if record is not None else None


# ---------------------------------------------------------------------------------------------------------------
# The worker: `servepack worker`


def check_bind(host: str, allow_public: bool) -> str:
    """The address to bind: refuse anything off loopback without the explicit opt-in, and say why."""
    try:
        host = worker_host(host)
    except ValueError as exc:
        raise UsageError(f"--host: {exc}") from None
    if not host_is_loopback(host) and not allow_public:
        what = "every interface" if host in ("0.0.0.0", "::") else host
        raise UsageError(
            f"--host {host}: refusing to bind {what}. llama.cpp's RPC has no authentication: anyone who can reach "
            f"the port can run code on this machine's devices. Bind a private network only, and pass {OPT_IN_FLAG} "
            "to say you understand")
    return host


def rpc_server_argv(binary: Path, host: str, port: int, devices: list[str], threads: int | None,
                    cache: bool) -> list[str]:
    argv = [str(binary), "--host", host, "--port", str(port)]
    if devices:
        argv += ["--device", ",".join(devices)]
    if threads is not None:
        argv += ["--threads", str(threads)]
    if cache:
        argv.append("--cache")
    return argv


def reachable_as(host: str) -> str:
    """The host a head names for a worker bound to `host`: a placeholder for every interface."""
    return "ADDRESS" if host in ("0.0.0.0", "::") else host


def head_snippet(host: str, port: int, devices: list[str]) -> str:
    """What the head needs: its --rpc value and the pack's [[topology.workers]] entry for this worker."""
    lines = ["[[topology.workers]]", f'host = "{reachable_as(host)}"', f"port = {port}"]
    if devices:
        lines.append("devices = [" + ", ".join(f'"{d}"' for d in devices) + "]")
    if not host_is_loopback(host):
        lines.insert(0, f"# [topology] needs {RPC_OPT_IN} = true for a worker off loopback")
    return "\n".join(lines)


def _port_accepts(host: str, port: int, timeout_s: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


class _InfoHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        srv = self.server
        assert isinstance(srv, _InfoServer)
        if self.path == "/fingerprint":
            body, code = srv.info().model_dump_json(indent=2).encode(), 200
        elif self.path == "/health":
            ok = srv.alive()
            body, code = json.dumps({"status": "ok" if ok else "rpc-server exited"}).encode(), 200 if ok else 503
        else:
            body, code = b'{"error": "not found"}', 404
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _InfoServer(http.server.ThreadingHTTPServer):
    """GET /fingerprint and GET /health of one worker, on its address and port + 1."""

    daemon_threads = True

    def __init__(self, host: str, port: int, info: Callable[[], WorkerInfo], alive: Callable[[], bool]) -> None:
        self.info = info
        self.alive = alive
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, port), _InfoHandler)


def _pump(fd: int, out: IO[str], found: list[str], ready: threading.Event) -> None:
    """Copy rpc-server's output (a pseudo-terminal, so it is line-buffered) to ours, noting its RPC protocol."""
    buf = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed its side
            chunk = b""
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace").rstrip("\r")
            out.write(line + "\n")
            out.flush()
            m = _PROTO_LINE.search(line)
            if m and not found:
                found.append(m.group(1))
                ready.set()
    with contextlib.suppress(OSError):
        os.close(fd)
    ready.set()


def _built_protocol(binary: Path) -> str | None:
    """The RPC protocol in the servepack build record beside `binary`, if any (when rpc-server does not say)."""
    record = read_build_record(binary)
    return record.rpc_protocol if record is not None else None


def _die_with_parent() -> Callable[[], None] | None:
    from servepack.engine.server import die_with_parent as arm

    return arm()


def serve_worker(
    rpc_server: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 50052,
    devices: list[str] | None = None,
    threads: int | None = None,
    cache_dir: Path | None = None,
    allow_public: bool = False,
    say: Say = print,
    ready_timeout_s: float = 60.0,
) -> int:
    """Run rpc-server in the foreground and serve this host's fingerprint on port + 1; return rpc-server's exit code.

    SIGTERM, SIGINT and SIGHUP stop rpc-server and return; rpc-server also dies with this process (PDEATHSIG).
    """
    host = check_bind(host, allow_public)
    if not 1 <= port <= 65534:
        raise UsageError(f"--port {port}: must be 1–65534 (the fingerprint is served on port + 1)")
    devices = list(devices or [])
    fp_port = fingerprint_port(port)
    for p in (port, fp_port):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, p))
            except OSError as exc:
                raise UsageError(f"cannot bind {rpc_address(host, p)} ({exc.strerror}); the worker needs its port "
                                 "and port + 1 free: pass another --port") from None
    own: dict[str, str] = {}
    if cache_dir is not None:
        cache_dir = cache_dir.expanduser().resolve()
        cache_dir.mkdir(parents=True, exist_ok=True)
        own["LLAMA_CACHE"] = str(cache_dir)
    env = server_env("native", set_vars=own).env  # rpc-server reads LLAMA_ARG_* too: never this shell's
    argv = rpc_server_argv(rpc_server, host, port, devices, threads, cache_dir is not None)
    binary_sha = sha256_file(rpc_server)
    host_fp = fingerprint()
    started = time.time()
    if not host_is_loopback(host):
        say(f"WARNING: {rpc_address(host, port)} is off loopback and llama.cpp's RPC is unauthenticated: keep this "
            "port on a private network")
    # rpc-server prints with stdio: on a pipe its lines would wait in a buffer, so it writes to a pseudo-terminal
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env,
                                preexec_fn=_die_with_parent())
    except OSError as exc:
        os.close(master)
        raise EngineError(f"cannot start {rpc_server} ({exc.strerror}); pass a working --rpc-server") from None
    finally:
        os.close(slave)
    found: list[str] = []
    announced = threading.Event()
    pump = threading.Thread(target=_pump, args=(master, sys.stdout, found, announced), daemon=True)
    pump.start()
    built_protocol = _built_protocol(rpc_server)

    def info() -> WorkerInfo:
        return WorkerInfo(
            servepack_version=__version__, endpoint=rpc_address(host, port), host=host_fp, started_at=started,
            rpc_server=RpcServerFacts(path=str(rpc_server), sha256=binary_sha, argv=argv, pid=proc.pid,
                                      protocol=found[0] if found else built_protocol))

    stop = threading.Event()
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    http_server: _InfoServer | None = None
    try:
        deadline = time.monotonic() + ready_timeout_s
        while not _port_accepts(host, port, 1.0):
            if proc.poll() is not None or stop.is_set() or time.monotonic() > deadline:
                why = (f"exited with code {proc.returncode}" if proc.poll() is not None
                       else "interrupted" if stop.is_set() else f"not listening after {ready_timeout_s:.0f} s")
                raise EngineError(f"rpc-server on {rpc_address(host, port)} {why}; see its output above")
            time.sleep(0.1)
        announced.wait(2)
        http_server = _InfoServer(host, fp_port, info, lambda: proc.poll() is None)
        threading.Thread(target=http_server.serve_forever, daemon=True).start()
        say(f"rpc-server pid {proc.pid} on {rpc_address(host, port)} · RPC protocol {info().rpc_server.protocol or '?'}"
            f" · sha256 {binary_sha[:12]}…")
        say(f"fingerprint: http://{rpc_address(host, fp_port)}/fingerprint ({host_fp.hostname}: {host_fp.label()})")
        where = "" if reachable_as(host) == host else " (ADDRESS: an address of this host the head reaches)"
        say(f"the head needs: --rpc {rpc_address(reachable_as(host), port)}{where}   (or, in the pack:)")
        say(head_snippet(host, port, devices))
        while proc.poll() is None and not stop.is_set():
            stop.wait(0.2)
    finally:
        if http_server is not None:
            http_server.shutdown()
            http_server.server_close()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for signum, old in previous.items():
            signal.signal(signum, old)
    code = proc.returncode
    say(f"rpc-server exited with code {code}")
    return 0 if stop.is_set() else (code or 1)


# ---------------------------------------------------------------------------------------------------------------
# The head's side


def worker_argv(rpc_server: Path, worker: RpcWorker) -> list[str]:
    """`servepack worker …` for a worker the run starts itself (always loopback)."""
    argv = [sys.executable, "-m", "servepack.cli.main", "worker", "--host", worker.host, "--port", str(worker.port),
            "--rpc-server", str(rpc_server)]
    for d in worker.devices:
        argv += ["--device", d]
    if worker.threads is not None:
        argv += ["--threads", str(worker.threads)]
    if worker.cache_dir is not None:
        argv += ["--cache-dir", worker.cache_dir]
    return argv


def worker_env(worker: RpcWorker) -> dict[str, str]:
    """`servepack worker`'s environment: servepack's own settings pass, server flags and secrets do not."""
    env = server_env("servepack").env
    if worker.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = worker.cuda_visible_devices
    return env


def _free_pair(host: str) -> int:
    """A port p where p and p + 1 are both free on `host`."""
    for _ in range(50):
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            p = int(s.getsockname()[1])
        if p < 65535:
            with contextlib.suppress(OSError), socket.socket(
                    socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s2:
                s2.bind((host, p + 1))
                return p
    raise EngineError(f"no two consecutive free ports on {host}")


def bind_ports(topology: Topology) -> Topology:
    """The topology with a free port (and port + 1) picked for every worker the run starts on port 0."""
    workers = [w.model_copy(update={"port": _free_pair(w.host)}) if w.port == 0 else w for w in topology.workers]
    return topology.model_copy(update={"workers": workers})


def check_reachable(workers: list[RpcWorker], timeout_s: float = 5.0) -> None:
    """A TCP connect to every worker's rpc-server before the head loads: an EngineError naming the first that fails."""
    for w in workers:
        try:
            with socket.create_connection((w.host, w.port), timeout=timeout_s):
                pass
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise EngineError(
                f"RPC worker {w.address} is not reachable ({why}, {timeout_s:g} s timeout): start it there with "
                f"`servepack worker --host {w.host} --port {w.port}`, or fix [topology.workers] in the pack"
            ) from None


def fetch_info(worker: RpcWorker, timeout_s: float = 5.0) -> tuple[WorkerInfo | None, str | None]:
    """The worker's fingerprint from port + 1, or (None, why) when it serves none (not `servepack worker`)."""
    url = f"http://{rpc_address(worker.host, fingerprint_port(worker.port))}/fingerprint"
    try:
        r = httpx.get(url, timeout=timeout_s)
        if r.status_code != 200:
            return None, f"{url} answered HTTP {r.status_code}"
        return WorkerInfo.model_validate_json(r.content), None
    except httpx.HTTPError as exc:
        return None, f"{url}: {type(exc).__name__}"
    except ValidationError as exc:
        return None, f"{url}: not a {WORKER_SCHEMA} fingerprint ({exc.error_count()} problems)"


def check_protocols(infos: list[tuple[RpcWorker, WorkerInfo | None]], head_protocol: str | None) -> None:
    """Head and every worker must speak one RPC protocol: an EngineError naming the worker that does not."""
    if head_protocol is None:
        return
    for w, info in infos:
        theirs = info.rpc_server.protocol if info is not None else None
        if theirs is not None and theirs != head_protocol:
            raise EngineError(
                f"RPC worker {w.address} speaks RPC protocol {theirs}, the head's build {head_protocol}: build head "
                "and workers from the same llama.cpp (`servepack engine build --from-pin --rpc`)")


class RemoteWorkerWatch:
    """Liveness of a worker through its /health on port + 1 (at most one probe a second)."""

    def __init__(self, worker: RpcWorker, timeout_s: float = 3.0) -> None:
        self.worker = worker
        self.url = f"http://{rpc_address(worker.host, fingerprint_port(worker.port))}/health"
        self.timeout_s = timeout_s
        self._last = 0.0

    def check_alive(self) -> None:
        now = time.monotonic()
        if now - self._last < 1.0:
            return
        self._last = now
        try:
            r = httpx.get(self.url, timeout=self.timeout_s)
            problem = None if r.status_code == 200 else f"HTTP {r.status_code} ({r.text[:80]})"
        except httpx.HTTPError as exc:
            problem = type(exc).__name__
        if problem is not None:
            raise ServerDied(f"RPC worker {self.worker.address} stopped answering during the run ({problem}); "
                             "partial results kept")

