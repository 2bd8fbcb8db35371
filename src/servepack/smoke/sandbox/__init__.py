"""Containment for model-written code and Layer B's shell tool (this module), with the supervisor that runs inside
the namespaces (`boot`, standard library only, passed to the interpreter as source) and the host-side reader of what
sandboxed code wrote (`rootfs`: nothing followed out of the root).

Every run is contained for real, or refused; there is no best-effort mode.

- namespaces: `unshare` starts the supervisor (servepack/smoke/sandbox/boot.py) as pid 1 and root of new user,
  mount, pid, network, IPC and UTS namespaces. It builds a read-only tmpfs root holding read-only binds of
  `/usr`, the Python prefix, `/etc/ld.so.cache` and four character devices, plus /work, a tmpfs of the disk
  quota; pivots into it and detaches the host's tree. The code runs as uid 0 of that user namespace with
  every capability dropped and locked (bounding set empty, SECBIT_NOROOT), no_new_privs, under rlimits.
  A root runner launches all this as a fresh unprivileged uid, so the code never has the host's root uid.
- bwrap (for hosts where `unshare` cannot do this, e.g. unprivileged user namespaces disabled but a setuid
  or AppArmor-allowed bubblewrap): bubblewrap builds the same root and namespaces with no capabilities left;
  the same supervisor runs inside it.
- none: the executed layer is refused (`require()` raises, exit 2) with the package to install.

The network namespace is new and holds one device, lo: in namespaces mode lo, down (no address answers); under
bubblewrap, which brings lo up in the namespace it makes, 127.0.0.1 answers only what the code itself listens
on. Either way neither the host's loopback TCP nor its abstract unix sockets can be reached. The pid namespace
hides every host process, so nothing outside can be signalled, and when the code exits or hits its deadline
every process it left is killed. No /proc is mounted. The environment is built from scratch (PATH, HOME,
TMPDIR, LANG); nothing of the runner's passes.

No new namespace, in either mode: a seccomp filter (`boot.namespace_filter`, installed after
no_new_privs, inherited by everything the code starts) fails unshare, setns and clone with a CLONE_NEW* flag
with EPERM (clone3 with ENOSYS, so libc falls back to clone). In a user namespace of its own the code would
hold every capability again; a network namespace of its own would have a loopback it could bring up. bwrap's
`--disable-userns` (with a user namespace) stays on as well. On a machine without a seccomp table in
`boot` (x86_64, aarch64, riscv64, ppc64le have one) the code is not run.

The working directory never enters the sandbox directly: the host streams it in, the supervisor unpacks
it into /work, and streams /work back after the run, which the host writes through `RootFS` (nothing
there follows a link out of the directory). /work being a tmpfs of `disk_quota_bytes` is the disk quota:
a write past it fails inside with ENOSPC and the result says `disk_full`.

Limits, honestly: the code shares the host kernel (a kernel exploit escapes), can read the world-readable
files under `/usr` and the Python prefix, can use CPU and memory up to the limits, and sees the real time.
Under bwrap the supervisor holds no capability, so the number of files in /work is not bounded (only their
bytes), and SysV shared memory stays open (namespaces mode closes it); both last only until the deadline.
`SandboxResult.refused` says why something was not run. `SERVEPACK_SANDBOX` (auto, namespaces, bwrap, off)
chooses the mode; auto tries namespaces, then bwrap.
"""

from __future__ import annotations

import functools
import io
import json
import os
import random
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from servepack.errors import UsageError
from servepack.settings import Settings
from servepack.smoke.sandbox.rootfs import RootFS, StreamError

OUTPUT_CAP_BYTES = 64 * 1024
MEMORY_LIMIT_BYTES = 512 * 1024 * 1024
FILE_SIZE_LIMIT_BYTES = 8 * 1024 * 1024
DISK_QUOTA_BYTES = 64 * 1024 * 1024
INODE_LIMIT = 4096
PROCESS_LIMIT = 32
OPEN_FILES_LIMIT = 64
SETUP_GRACE_S = 15.0  # beyond the code's own deadline: building the namespaces, copying /work in and out
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
_UNPRIVILEGED_UID_RANGE = (200_000, 260_000)
_ROOT_BINDS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
_LAUNCH_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
_MODES = ("auto", "namespaces", "bwrap", "off")
_SHELL_SEPARATORS = {"|", "||", "&&", ";", "&", "|&", "(", ")", ";;"}
_BOOT = Path(__file__).with_name("boot.py")


class SandboxUnavailable(UsageError):
    """No real isolation on this host, so executed code is refused."""


@dataclass(frozen=True)
class SandboxResult:
    """What one contained run produced; `refused` set means nothing ran."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    refused: str | None
    killed: str | None
    disk_full: bool = False
    mode: str = ""


@dataclass(frozen=True)
class Isolation:
    """How runs are contained on this host, detected once."""

    mode: Literal["namespaces", "bwrap", "none"]
    reason: str
    bwrap: str | None = None
    # True: the code keeps the runner's uid, minus every capability (under unshare: as root of a user
    # namespace). False (a root runner): no user namespace; the code runs as a fresh unprivileged uid.
    userns: bool = True
    # bwrap only: create a user namespace. Off for a setuid bubblewrap on a host without user namespaces.
    bwrap_userns: bool = True


def _python_executable() -> str:
    return os.path.realpath(sys.executable)


def _refusal(reason: str, mode: str = "none") -> SandboxResult:
    return SandboxResult("", "", None, False, reason, None, mode=mode)


def require() -> Isolation:
    """The isolation in use; SandboxUnavailable (exit 2, one line) when there is none."""
    iso = isolation()
    if iso.mode == "none":
        raise SandboxUnavailable(iso.reason)
    return iso


@functools.lru_cache(maxsize=1)
def isolation() -> Isolation:
    """Probe once which real isolation works here (SERVEPACK_SANDBOX narrows the choice)."""
    choice = Settings.load().sandbox
    if choice not in _MODES:
        raise UsageError(f"SERVEPACK_SANDBOX={choice}: choose one of {', '.join(_MODES)}")
    if choice == "off":
        return Isolation("none", "executed code is disabled by SERVEPACK_SANDBOX=off")
    tried: list[str] = []
    userns = os.geteuid() != 0
    if choice in ("auto", "namespaces"):
        candidate = Isolation("namespaces", "mount, pid, network, IPC and UTS namespaces via unshare", None, userns)
        problem = _probe(candidate)
        if problem is None:
            return candidate
        tried.append(f"namespaces unavailable ({problem})")
    else:
        tried.append("namespaces skipped (SERVEPACK_SANDBOX=bwrap)")
    if choice in ("auto", "bwrap"):
        exe = shutil.which("bwrap")
        if exe is None:
            tried.append(f"bubblewrap is not installed; {INSTALL_HINT}")
        else:
            problems = []
            for bwrap_userns in (True, False) if userns else (False,):
                candidate = Isolation("bwrap", f"namespaces via bubblewrap {exe}", exe, userns, bwrap_userns)
                problems.append(_probe(candidate))
                if problems[-1] is None:
                    return candidate
            tried.append(f"bubblewrap {exe} failed ({problems[0]}; it needs user namespaces, or to be setuid root)")
    return Isolation("none", "no sandbox for executed code: " + "; ".join(tried))


def _probe(iso: Isolation) -> str | None:
    """None when a trivial program runs contained under `iso`; else the reason it did not."""
    if iso.mode == "namespaces" and (not sys.platform.startswith("linux") or shutil.which("unshare") is None):
        return "no unshare binary (util-linux) on this host"
    try:
        result = _run(iso, [_python_executable(), "-I", "-S", "-c", "print('ok')"], None, 20.0, 1 << 20)
    except OSError as exc:
        return str(exc)[:160]
    if result.exit_code == 0 and result.stdout == "ok\n":
        return None
    detail = (result.stderr.strip().splitlines() or [result.killed or "no output"])[-1]
    return detail[:160]


def _rlimits(timeout_s: float) -> list[tuple[str, int]]:
    return [
        ("RLIMIT_CPU", int(timeout_s) + 2),  # a backstop: the wall clock should fire first
        ("RLIMIT_AS", MEMORY_LIMIT_BYTES),
        ("RLIMIT_FSIZE", FILE_SIZE_LIMIT_BYTES),
        ("RLIMIT_NPROC", PROCESS_LIMIT),
        ("RLIMIT_NOFILE", OPEN_FILES_LIMIT),
        ("RLIMIT_CORE", 0),
    ]


def _env() -> dict[str, str]:
    """The code's whole environment, built from nothing."""
    return {
        "PATH": "/opt/sandbox/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/work",
        "TMPDIR": "/work",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _binds() -> tuple[list[str], list[tuple[str, str]]]:
    """Read-only bind mounts and symlinks that make up the new root."""
    binds: list[str] = []
    links: list[tuple[str, str]] = []
    for path in _ROOT_BINDS:
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
        elif os.path.isdir(path):
            binds.append(path)
    prefix = os.path.realpath(sys.base_prefix)
    if not any(prefix == b or prefix.startswith(b + "/") for b in binds):
        binds.append(prefix)
    binds += [p for p in ("/etc/ld.so.cache", *_DEVICES) if os.path.exists(p)]
    links.append(("/opt/sandbox/bin/python3", _python_executable()))
    links.append(("/opt/sandbox/bin/python", _python_executable()))
    return binds, links


def _launcher(iso: Isolation, root: str, quota: int) -> list[str]:
    """The command that starts the supervisor inside fresh namespaces."""
    boot = [_python_executable(), "-I", "-S", "-c", _BOOT.read_text(encoding="utf-8")]
    if iso.mode == "namespaces":
        unshare = shutil.which("unshare") or "unshare"
        userns = ["--map-root-user"] if iso.userns else []
        return [unshare, *userns, "--net", "--mount", "--pid", "--ipc", "--uts", "--fork", "--kill-child",
                "--propagation", "private", *boot]  # fmt: skip
    assert iso.bwrap is not None
    binds, links = _binds()
    # --as-pid-1: the supervisor is the namespace's init, so the code can neither kill it nor outlive it.
    argv = [iso.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--as-pid-1", "--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "ALL"]  # fmt: skip
    if iso.userns and iso.bwrap_userns:
        argv += ["--unshare-user", "--disable-userns"]
    elif not iso.userns:  # a root runner: the supervisor keeps what it needs to hand /work to the code's fresh uid
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_CHOWN", "CAP_KILL"):
            argv += ["--cap-add", cap]
    made: set[str] = set()
    for path in binds:
        for parent in [str(p) for p in reversed(Path(path).parents)][1:]:
            if parent not in made and not any(parent == b or parent.startswith(b + "/") for b in binds):
                argv += ["--perms", "0755", "--dir", parent]  # bubblewrap would copy a 0700 parent's mode
                made.add(parent)
        argv += ["--dev-bind" if path in _DEVICES else "--ro-bind", path, path]
    for link, target in links:
        argv += ["--symlink", target, link]
    argv += ["--size", str(quota), "--perms", "0755", "--tmpfs", "/work", "--remount-ro", "/", "--chdir", "/work"]
    return [*argv, *boot]


def _run(iso: Isolation, argv: list[str], workspace: RootFS | None, timeout_s: float, quota: int,
         stdin: str = "") -> SandboxResult:  # fmt: skip
    """Run argv contained under iso; the workspace (if any) goes in and, after the run, comes back."""
    seed = io.BytesIO()
    if workspace is not None:
        used = workspace.file_bytes()
        if used > quota:
            return SandboxResult("", "", None, False, None, f"the workspace holds {used} bytes, over the disk "
                                 f"quota of {quota}", disk_full=True, mode=iso.mode)  # fmt: skip
        workspace.export(seed)
    else:
        seed.write(b'{"t": "end"}\n')
    with tempfile.TemporaryDirectory(prefix="servepack-root-") as root:
        binds, links = _binds()
        cfg = {
            "setup": iso.mode == "namespaces", "root": root, "ro_binds": binds, "symlinks": links, "quota": quota,
            "inodes": INODE_LIMIT, "argv": argv, "env": _env(), "rlimits": _rlimits(timeout_s),
            "timeout_s": timeout_s, "output_cap": OUTPUT_CAP_BYTES, "export": workspace is not None,
            "stdin": stdin, "uid": None if iso.userns else random.randint(*_UNPRIVILEGED_UID_RANGE),
        }  # fmt: skip
        payload = json.dumps(cfg).encode() + b"\n" + seed.getvalue()
        out, err, killed = _supervise(_launcher(iso, root, quota), payload, timeout_s + SETUP_GRACE_S, quota)
    return _result(iso, out, err, killed, workspace)


def _supervise(launcher: list[str], payload: bytes, deadline_s: float, quota: int) -> tuple[bytes, bytes, str | None]:
    """Start the launcher in a new session with a scrubbed environment; feed it, read it, kill it at the end."""
    proc = subprocess.Popen(
        launcher, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_LAUNCH_ENV,
        cwd="/", start_new_session=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    threading.Thread(target=_feed, args=(proc.stdin, payload), daemon=True).start()
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    caps = {out_fd: quota + 8 * 1024 * 1024, err_fd: OUTPUT_CAP_BYTES}
    buffers = {fd: bytearray() for fd in caps}
    killed: str | None = None
    deadline = time.monotonic() + deadline_s
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        while sel.get_map() and killed is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                killed = f"the sandbox did not finish within {deadline_s:.1f} s"
                break
            for key, _ in sel.select(timeout=min(remaining, 0.2)):
                chunk = os.read(key.fd, 1 << 20)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buffers[key.fd] += chunk
                if len(buffers[key.fd]) > caps[key.fd]:
                    killed = "the sandbox wrote more than its quota allows"
    _kill_group(proc)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return bytes(buffers[out_fd]), bytes(buffers[err_fd]), killed


def _feed(pipe: Any, payload: bytes) -> None:
    try:
        with pipe:
            pipe.write(payload)
    except OSError:
        pass  # the supervisor failed early; its stderr says why


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the launcher's group: the namespace's pid 1 dies with it, and with pid 1 every process inside."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _result(iso: Isolation, out: bytes, err: bytes, killed: str | None, workspace: RootFS | None) -> SandboxResult:
    """The supervisor's status line as a SandboxResult; the workspace updated from its stream."""
    head, sep, _ = out.partition(b"\n")
    try:
        status = json.loads(head) if sep else None
    except ValueError:
        status = None
    if not isinstance(status, dict):
        lines = err.decode("utf-8", "replace").strip().splitlines() or ["no output"]
        return SandboxResult("", "", None, False, None, killed or f"sandbox failed: {lines[-1][:300]}", mode=iso.mode)
    stderr = str(status.get("stderr", ""))
    code = status.get("exit_code")
    reason = status.get("killed") or (_signal_reason(-code) if isinstance(code, int) and code < 0 else None)
    disk_full = int(status.get("disk_free", 1 << 30)) < 64 * 1024 or int(status.get("inodes_free", 1)) == 0
    if workspace is not None:
        problem = status.get("export_error")
        if problem is None and killed is None:
            try:
                workspace.replace_with(out, len(head) + 1)
            except (StreamError, OSError) as exc:
                problem = str(exc)
        if problem is not None or killed is not None:
            stderr += f"\nservepack-sandbox: workspace changes discarded: {problem or killed}"
            disk_full = disk_full or "bytes" in str(problem)
    return SandboxResult(
        stdout=str(status.get("stdout", "")), stderr=stderr, exit_code=code if isinstance(code, int) else None,
        timed_out=bool(status.get("timed_out")), refused=None, killed=reason or killed, disk_full=disk_full,
        mode=iso.mode,
    )  # fmt: skip


def _signal_reason(signum: int) -> str:
    names = {signal.SIGXCPU: "cpu time limit", signal.SIGXFSZ: "file size limit", signal.SIGKILL: "SIGKILL"}
    try:
        return f"killed by {names.get(signal.Signals(signum), signal.Signals(signum).name)}"
    except ValueError:
        return f"killed by signal {signum}"


def run_python(code: str, *, timeout_s: float = 10.0, disk_quota_bytes: int = DISK_QUOTA_BYTES) -> SandboxResult:
    """Run Python source (fed on stdin) in an empty /work under containment; stdout/stderr captured."""
    iso = isolation()
    if iso.mode == "none":
        return _refusal(iso.reason)
    argv = [_python_executable(), "-I", "-S", "-B", "-"]
    source = code.encode("utf-8", errors="replace").decode("utf-8")  # lone surrogates cannot be fed as UTF-8
    return _run(iso, argv, None, timeout_s, disk_quota_bytes, stdin=source)


def shell_refusal(command: str, allowed: Sequence[str] | None) -> str | None:
    """Why a shell command may not run under the allow-list, or None; checks every command word."""
    if "\n" in command or "\r" in command:
        return "newlines are not allowed; join commands with ';' or '&&'"
    if "`" in command or "$(" in command or "<(" in command or ">(" in command:
        return "command substitution is not allowed"
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError as exc:
        return f"cannot parse the command: {exc}"
    if not tokens:
        return "empty command"
    if allowed is None:
        return None
    expect_command = True
    for token in tokens:
        if token in _SHELL_SEPARATORS:
            expect_command = True
            continue
        if expect_command:
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", token):
                return "environment assignments are not allowed"
            if token not in allowed:
                return f"command {token!r} is not allowed (allowed: {', '.join(sorted(allowed))})"
            expect_command = False
    return None


def run_shell(
    command: str, *, cwd: Path, timeout_s: float = 10.0, allowed: Sequence[str] | None = None,
    disk_quota_bytes: int = DISK_QUOTA_BYTES,
) -> SandboxResult:  # fmt: skip
    """Run one /bin/sh command line on a copy of `cwd` as /work; `cwd` then holds what the command left."""
    refusal = shell_refusal(command, allowed)
    if refusal is not None:
        return _refusal(refusal, "policy")
    iso = isolation()
    if iso.mode == "none":
        return _refusal(iso.reason)
    return _run(iso, ["/bin/sh", "-c", command], RootFS(Path(cwd)), timeout_s, disk_quota_bytes)
