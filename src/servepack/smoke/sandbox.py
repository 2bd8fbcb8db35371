"""Containment for model-written code and Layer B's shell tool.

Design, where Linux namespaces can be created (root, or unprivileged user namespaces through `unshare -r`):

- `unshare --net --mount --pid --fork --kill-child` starts a bootstrap as pid 1 of new network, mount and
  pid namespaces. The network namespace holds only a loopback device that is down: no address at all can
  be reached, the host's loopback included.
- The bootstrap mounts a small tmpfs as a new root holding read-only, nosuid, nodev bind mounts of `/usr`,
  the Python prefix, `/etc/ld.so.cache` and four character devices; the working directory is bound at
  `/work` and is the only writable place (the tmpfs root is remounted read-only). It chroots there, so
  `/etc`, `/home`, `/root`, `/tmp` and the caller's files do not exist for the code.
- As real root it then drops to a fresh unprivileged uid/gid chosen per run (so RLIMIT_NPROC counts only
  this run's processes) and sets no_new_privs, then applies rlimits (CPU seconds, address space, file
  size, process count, open files, no core files) and execs the code with a scrubbed environment.
- The caller starts it in a new session; on wall-clock timeout or too much output the whole process
  group is killed, and `--kill-child` plus the pid namespace take every descendant with it.

Limits, honestly: the code shares the host kernel (a kernel exploit escapes), can read the world-readable
files under `/usr` and the Python prefix, can use CPU and memory up to the limits, and sees the real time.
Without namespaces (no `unshare`, or not permitted) the fallback is best effort only: Python runs with an
audit hook that blocks opening files outside the working directory and the standard library, sockets,
subprocesses and forks, and code that names network-capable or hook-bypassing modules is refused outright;
shell commands are refused unless an allow-list is given and no argument is an absolute or parent path.
`SandboxResult.refused` says why something was not run.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import random
import re
import resource
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

OUTPUT_CAP_BYTES = 64 * 1024
MEMORY_LIMIT_BYTES = 512 * 1024 * 1024
FILE_SIZE_LIMIT_BYTES = 8 * 1024 * 1024
PROCESS_LIMIT = 32
OPEN_FILES_LIMIT = 64
_UNPRIVILEGED_UID_RANGE = (200_000, 260_000)
_ROOT_BINDS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_SIGNAL_MARKER = "servepack-sandbox: target killed by signal "
_SHELL_SEPARATORS = {"|", "||", "&&", ";", "&", "|&", "(", ")", ";;"}
_NETWORK_MODULES = {
    "socket", "ssl", "urllib", "http", "ftplib", "smtplib", "poplib", "imaplib", "telnetlib", "asyncio",
    "ctypes", "subprocess", "multiprocessing", "socketserver", "xmlrpc", "importlib", "_socket", "_ctypes",
}  # fmt: skip

_DYNAMIC_BUILTINS = {"__import__", "exec", "eval", "compile", "__builtins__"}

# Runs as pid 1 of the new namespaces with host Python in isolated mode; argv[1] is the JSON config.
_BOOTSTRAP = r"""
import ctypes, json, os, resource, sys
cfg = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
RDONLY, NOSUID, NODEV, REMOUNT, BIND, REC = 1, 2, 4, 32, 4096, 16384
def enc(s):
    return None if s is None else s.encode()
def mount(src, dst, fs, flags, data=None):
    if libc.mount(enc(src), enc(dst), enc(fs), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "mount %s on %s: %s" % (src, dst, os.strerror(err)))
def kept_flags(path):
    f = os.statvfs(path).f_flag
    return (f & (2 | 4 | 8 | 1024 | 2048)) | ((1 << 21) if f & 4096 else 0)
def bind(src, dst, writable=False):
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    mount(src, dst, None, BIND | REC)
    nodev = 0 if src.startswith("/dev/") else NODEV
    mount(None, dst, None, REMOUNT | BIND | NOSUID | nodev | kept_flags(src) | (0 if writable else RDONLY))
root = cfg["root"]
mount("tmpfs", root, "tmpfs", NOSUID | NODEV, "size=4m,mode=0755")
for path in cfg["ro_binds"]:
    bind(path, root + path)
for link, target in cfg["symlinks"]:
    os.makedirs(os.path.dirname(root + link), exist_ok=True)
    os.symlink(target, root + link)
bind(cfg["work"], root + "/work", writable=True)
mount(None, root, None, REMOUNT | RDONLY | NOSUID | NODEV, "size=4m,mode=0755")
os.chroot(root)
os.chdir("/work")
if cfg["uid"] is not None:
    os.setgroups([])
    os.setgid(cfg["uid"])
    os.setuid(cfg["uid"])
libc.prctl(38, 1, 0, 0, 0)
os.umask(0o022)
child = os.fork()
if child == 0:
    for name, value in cfg["rlimits"]:
        resource.setrlimit(getattr(resource, name), (value, value))
    os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])
# pid 1 stays to report a death by signal, which unshare itself misreports.
_, status = os.waitpid(child, 0)
if os.WIFSIGNALED(status):
    sys.stderr.write("\n%s%d\n" % (cfg["marker"], os.WTERMSIG(status)))
    sys.stderr.flush()
    os._exit(128 + os.WTERMSIG(status))
os._exit(os.WEXITSTATUS(status))
"""

# Fallback without namespaces: an audit hook confines the code; argv[1] is the code, argv[2] a JSON list
# of directories that may be read.
_HOOK_BOOT = r"""
import json, os, sys
_cwd = os.path.realpath(os.getcwd())
_readable = [os.path.realpath(p) for p in json.loads(sys.argv[2])]
def _inside(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)
_BLOCKED = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
            "os.forkpty", "ctypes.", "os.kill", "os.killpg", "pty.", "os.putenv", "sys._getframe")
def _hook(event, args):
    if event == "open":
        path = args[0]
        if isinstance(path, int):
            return
        real = os.path.realpath(os.fsdecode(path))
        writing = any(c in str(args[1] or "r") for c in "wax+")
        if _inside(real, [_cwd]) or (not writing and _inside(real, _readable + ["/dev/null"])):
            return
        raise PermissionError("sandbox: %s is outside the working directory" % real)
    if event.startswith(_BLOCKED):
        raise PermissionError("sandbox: %s is not permitted" % event)
_code = sys.argv[1]
del sys.argv[1:]
sys.addaudithook(_hook)
exec(compile(_code, "<sandbox>", "exec"), {"__name__": "__main__"})
"""


@dataclass(frozen=True)
class SandboxResult:
    """What one contained run produced; `refused` set means nothing ran."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    refused: str | None
    killed: str | None


@dataclass(frozen=True)
class Isolation:
    """How runs are contained on this host, detected once."""

    mode: Literal["namespaces", "audit"]
    unshare_argv: tuple[str, ...]
    drop_privileges: bool
    reason: str


def _python_executable() -> str:
    return os.path.realpath(sys.executable)


def _refusal(reason: str) -> SandboxResult:
    return SandboxResult("", "", None, False, reason, None)


@functools.lru_cache(maxsize=1)
def isolation() -> Isolation:
    """Probe once whether namespaces + chroot work here; otherwise fall back to the audit-hook mode."""
    exe = shutil.which("unshare")
    if not sys.platform.startswith("linux") or exe is None:
        return Isolation("audit", (), False, "no unshare binary (util-linux) on this host")
    argv = [exe, "--net", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private"]
    root = os.geteuid() == 0
    if not root:
        argv.insert(1, "--map-root-user")
    candidate = Isolation("namespaces", tuple(argv), root, "network, mount and pid namespaces via unshare")
    with tempfile.TemporaryDirectory(prefix="servepack-probe-") as tmp:
        work = Path(tmp, "work")
        work.mkdir()
        probe = _run_namespaced(
            candidate, [_python_executable(), "-I", "-S", "-c", "print('ok')"], work, 15.0
        )
    if probe.exit_code == 0 and probe.stdout.strip() == "ok":
        return candidate
    detail = (probe.stderr.strip().splitlines() or ["no output"])[-1]
    return Isolation("audit", (), False, f"namespaces unavailable ({detail[:160]})")


def _rlimits(timeout_s: float) -> list[tuple[str, int]]:
    return [
        ("RLIMIT_CPU", int(timeout_s) + 2),  # a backstop: the wall clock should fire first
        ("RLIMIT_AS", MEMORY_LIMIT_BYTES),
        ("RLIMIT_FSIZE", FILE_SIZE_LIMIT_BYTES),
        ("RLIMIT_NPROC", PROCESS_LIMIT),
        ("RLIMIT_NOFILE", OPEN_FILES_LIMIT),
        ("RLIMIT_CORE", 0),
    ]


def _env(home: str) -> dict[str, str]:
    return {
        "PATH": "/opt/sandbox/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
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
    for extra in ("/etc/ld.so.cache", "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"):
        if os.path.exists(extra):
            binds.append(extra)
    links.append(("/opt/sandbox/bin/python3", _python_executable()))
    links.append(("/opt/sandbox/bin/python", _python_executable()))
    return binds, links


def _chown_tree(path: Path, uid: int) -> None:
    """Hand the working tree to the run's unprivileged uid so it can write there and nowhere else."""
    os.chown(path, uid, uid)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


def _run_namespaced(iso: Isolation, argv: list[str], work: Path, timeout_s: float) -> SandboxResult:
    uid = None
    if iso.drop_privileges:
        uid = random.randint(*_UNPRIVILEGED_UID_RANGE)
        _chown_tree(work, uid)
    binds, links = _binds()
    with tempfile.TemporaryDirectory(prefix="servepack-root-") as root:
        cfg = {
            "root": root,
            "work": str(work),
            "ro_binds": binds,
            "symlinks": links,
            "uid": uid,
            "rlimits": _rlimits(timeout_s),
            "argv": argv,
            "env": _env("/work"),
            "marker": _SIGNAL_MARKER,
        }
        boot = [*iso.unshare_argv, _python_executable(), "-I", "-S", "-c", _BOOTSTRAP, json.dumps(cfg)]
        result = _supervise(boot, cwd=work, env=_env(str(work)), timeout_s=timeout_s + 0.5, preexec=None)
    head, sep, tail = result.stderr.rpartition("\n" + _SIGNAL_MARKER)
    if not sep or not tail.strip().isdigit():
        return result
    signum = int(tail.strip())
    return replace(result, stderr=head, exit_code=-signum, killed=_signal_reason(signum))


def _supervise(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    preexec: list[tuple[str, int]] | None,
) -> SandboxResult:
    """Run argv in a new session, capping output and wall time; kill the whole group on either."""

    def limits() -> None:
        for name, value in preexec or []:
            resource.setrlimit(getattr(resource, name), (value, value))

    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=limits if preexec else None,
    )
    assert proc.stdout is not None and proc.stderr is not None
    buffers: dict[int, bytearray] = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    killed: str | None = None
    timed_out = False
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out, killed = True, f"wall-clock timeout after {timeout_s:.1f} s"
                break
            for key, _ in sel.select(timeout=min(remaining, 0.2)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buffers[key.fd] += chunk
            if sum(len(b) for b in buffers.values()) > OUTPUT_CAP_BYTES:
                killed = f"output exceeded {OUTPUT_CAP_BYTES} bytes"
                break
    if killed is not None:
        _kill_group(proc)
    try:
        code = proc.wait(timeout=max(0.5, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        code = proc.wait()
        timed_out, killed = True, killed or f"wall-clock timeout after {timeout_s:.1f} s"
    _kill_group(proc)  # descendants that outlived the leader
    proc.stdout.close()
    proc.stderr.close()
    out, err = (bytes(b[:OUTPUT_CAP_BYTES]).decode("utf-8", "replace") for b in buffers.values())
    if killed is not None:
        return SandboxResult(out, err, None, timed_out, None, killed)  # we stopped it; no status of its own
    return SandboxResult(out, err, code, False, None, _signal_reason(-code) if code < 0 else None)


def _signal_reason(signum: int) -> str:
    names = {signal.SIGXCPU: "cpu time limit", signal.SIGXFSZ: "file size limit", signal.SIGKILL: "SIGKILL"}
    try:
        return f"killed by {names.get(signal.Signals(signum), signal.Signals(signum).name)}"
    except ValueError:
        return f"killed by signal {signum}"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _network_capable(code: str) -> str | None:
    """Name of a module or builtin that could reach the network or bypass the audit hook, if any."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None  # let Python report it
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif isinstance(node, ast.Name) and node.id in _DYNAMIC_BUILTINS:
            return node.id
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        for name in names:
            if name.split(".")[0] in _NETWORK_MODULES:
                return name
    return None


def run_python(code: str, *, timeout_s: float = 10.0) -> SandboxResult:
    """Run Python source in an empty temporary directory under containment; stdout/stderr captured."""
    iso = isolation()
    with tempfile.TemporaryDirectory(prefix="servepack-sandbox-") as tmp:
        work = Path(tmp)
        if iso.mode == "namespaces":
            argv = [_python_executable(), "-I", "-S", "-B", "-c", code]
            return _run_namespaced(iso, argv, work, timeout_s)
        culprit = _network_capable(code)
        if culprit is not None:
            return _refusal(f"{iso.reason}; refusing network-capable code (uses {culprit})")
        readable = json.dumps(sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}))
        argv = [_python_executable(), "-I", "-S", "-B", "-c", _HOOK_BOOT, code, readable]
        return _supervise(
            argv, cwd=work, env=_env(str(work)), timeout_s=timeout_s, preexec=_rlimits(timeout_s)
        )


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
    command: str, *, cwd: Path, timeout_s: float = 10.0, allowed: Sequence[str] | None = None
) -> SandboxResult:
    """Run one /bin/sh command line with `cwd` as the only writable (and visible) directory."""
    refusal = shell_refusal(command, allowed)
    if refusal is not None:
        return _refusal(refusal)
    iso = isolation()
    if iso.mode == "namespaces":
        return _run_namespaced(iso, ["/bin/sh", "-c", command], Path(cwd), timeout_s)
    if allowed is None:
        return _refusal(f"{iso.reason}; an unrestricted shell needs namespaces")
    words = shlex.split(command)
    if any(w.startswith(("/", "~")) or ".." in w.split("/") for w in words):
        return _refusal(f"{iso.reason}; absolute and parent paths are refused")
    return _supervise(
        ["/bin/sh", "-c", command], cwd=Path(cwd), env=_env(str(cwd)), timeout_s=timeout_s,
        preexec=_rlimits(timeout_s),
    )  # fmt: skip
