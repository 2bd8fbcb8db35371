"""Escape attempts against the sandbox, in every containment mode this host offers; each must be contained.

The mode each test ran in is in its id: `namespaces` (unshare; as root the code gets a fresh unprivileged
uid), `namespaces+userns` (unshare with a user namespace, the code uid 0 there with no capability: what a
non-root runner gets), `bwrap` and `bwrap+userns` (the same two through bubblewrap, the fallback for hosts
without user namespaces), `bwrap+nouserns` (bubblewrap creating no user namespace and keeping the runner's
uid, as a setuid bubblewrap does on a host without user namespaces). Every test also asserts `result.mode`.
A mode this host cannot provide is skipped with the probe's reason; the refusal path (no mode at all) is in
test_sandbox_refusal.py, and a real unprivileged runner in test_sandbox_unprivileged.py.
"""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from servepack.smoke import sandbox
from servepack.smoke.sandbox import Isolation, SandboxResult
from system_deps import require

MODES = ["namespaces", "namespaces+userns", "bwrap", "bwrap+userns", "bwrap+nouserns"]
ROOT = os.geteuid() == 0
# Killed at its deadline (1.5-3 s), not left to run: the code under test loops forever. Generous, since a busy
# 2-core host may take seconds to reap a fork bomb; this is no speed test.
KILLED_WITHIN_S = 60.0


@functools.cache
def _isolation(name: str) -> Isolation | str:
    """The Isolation for a test mode, or why this host cannot provide it."""
    kind, _, variant = name.partition("+")
    userns = bool(variant) or not ROOT
    if not ROOT and not variant:
        return "a non-root runner always keeps its uid (see the +userns variant)"
    if kind == "bwrap":
        require("bwrap")  # bubblewrap: fails under make test (which installs it), skips elsewhere
    bwrap = sandbox.shutil.which("bwrap")
    iso = Isolation("namespaces" if kind == "namespaces" else "bwrap", name, bwrap, userns, variant != "nouserns")
    problem = sandbox._probe(iso)
    return iso if problem is None else f"{name} unavailable here: {problem}"


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    iso = _isolation(request.param)
    if isinstance(iso, str):
        pytest.skip(iso)
    monkeypatch.setattr(sandbox, "isolation", lambda: iso)
    return iso.mode


def _survivors(marker: str) -> list[int]:
    """Pids whose command line still carries the marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _wait_gone(marker: str, within_s: float = 30.0) -> list[int]:  # polls: returns as soon as they are gone
    deadline = time.monotonic() + within_s
    while _survivors(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _survivors(marker)


def test_normal_code_prints_exact_stdout(mode: str) -> None:
    result = sandbox.run_python("print('hello', 6 * 7)\nprint(sorted({3, 1, 2}))")
    assert result == SandboxResult("hello 42\n[1, 2, 3]\n", "", 0, False, None, None, False, mode)


def test_reading_host_files_fails(mode: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-" + uuid.uuid4().hex)
    result = sandbox.run_python(f"print(open({str(secret)!r}).read())")
    assert (result.mode, result.exit_code) == (mode, 1)
    assert "TOPSECRET" not in result.stdout and "FileNotFoundError" in result.stderr
    passwd = sandbox.run_python("print(open('/etc/passwd').read())")
    assert "root:" not in passwd.stdout and passwd.exit_code == 1
    work = tmp_path / "ws"
    work.mkdir()
    for attempt in ("cat ../secret.txt", f"cat {secret}", "cat /etc/passwd /etc/shadow", "ls /home /tmp /var"):
        shell = sandbox.run_shell(attempt, cwd=work, allowed=["cat", "ls"])
        assert shell.mode == mode and shell.exit_code not in (0, None), attempt
        assert "TOPSECRET" not in shell.stdout and "root:" not in shell.stdout and "secret" not in shell.stdout


def test_writing_host_files_fails(mode: str, tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    result = sandbox.run_python(f"open({str(target)!r}, 'w').write('x')")
    assert (result.mode, result.exit_code) == (mode, 1)
    work = tmp_path / "ws"
    work.mkdir()
    for attempt in ("echo x > ../escaped.txt", f"echo x > {target}", "echo x > /usr/escaped", "echo x > /escaped"):
        shell = sandbox.run_shell(attempt, cwd=work, allowed=["echo"])
        assert shell.mode == mode and shell.exit_code != 0, attempt
    assert not target.exists() and os.listdir(tmp_path) == ["ws"] and os.listdir(work) == []


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the runner's own uid that the sandboxed code will try to kill."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def test_signalling_the_runner_fails(mode: str, victim: subprocess.Popen[bytes]) -> None:
    code = (
        "import os, signal\n"
        f"for target in ({victim.pid}, {os.getpid()}, {os.getppid()}):\n"
        "    try:\n"
        "        os.kill(target, signal.SIGKILL)\n"
        "        print('signalled', target)\n"
        "    except OSError as exc:\n"
        "        print('refused', target, type(exc).__name__)\n"
        "os.kill(-1, signal.SIGKILL)\n"
    )
    result = sandbox.run_python(code)
    assert result.mode == mode
    assert "signalled" not in result.stdout and result.stdout.count("refused") == 3
    time.sleep(0.2)
    assert victim.poll() is None  # still running


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A loopback TCP listener recording every connection it accepts."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    accepted = _accepting(server)
    yield server.getsockname()[1], accepted
    server.close()


@pytest.fixture
def abstract_listener() -> Iterator[tuple[str, list[str]]]:
    """A listener on an abstract unix socket (no file: only network namespaces separate these)."""
    name = "servepack-test-" + uuid.uuid4().hex
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(4)
    accepted = _accepting(server)
    yield name, accepted
    server.close()


def _accepting(server: socket.socket) -> list[str]:
    server.settimeout(0.2)
    accepted: list[str] = []

    def serve() -> None:
        while server.fileno() != -1:
            try:
                conn, addr = server.accept()
            except (TimeoutError, OSError):
                continue
            accepted.append(str(addr))
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return accepted


def test_loopback_tcp_is_unreachable(mode: str, listener: tuple[int, list[str]], tmp_path: Path) -> None:
    port, accepted = listener
    result = sandbox.run_python(
        f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=3)\nprint('connected')"
    )
    assert (result.mode, result.exit_code) == (mode, 1)
    # unshare leaves the namespace's loopback down; bubblewrap brings up one of its own, with nothing behind it
    refusal = "Network is unreachable" if mode == "namespaces" else "Connection refused"
    assert "connected" not in result.stdout and refusal in result.stderr
    script = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('connected')"
    shell = sandbox.run_shell(f'python3 -c "{script}"', cwd=tmp_path, allowed=["python3"])
    assert "connected" not in shell.stdout and shell.exit_code == 1
    assert accepted == []


def test_abstract_unix_socket_is_unreachable(mode: str, abstract_listener: tuple[str, list[str]]) -> None:
    name, accepted = abstract_listener
    code = (
        "import socket\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        f"s.connect('\\0{name}')\nprint('connected')"
    )
    result = sandbox.run_python(code)
    assert (result.mode, result.exit_code) == (mode, 1)
    assert "connected" not in result.stdout and "ConnectionRefusedError" in result.stderr
    assert accepted == []


_DAEMON = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', '{marker}'])\n"
    "    os._exit(0)\n"
    "time.sleep(0.3)\n"
    "print('spawned', flush=True)\n"
)


def test_daemon_does_not_outlive_a_finished_run(mode: str) -> None:
    marker = "daemon_" + uuid.uuid4().hex
    result = sandbox.run_python(_DAEMON.format(marker=marker))
    assert (result.mode, result.exit_code, result.stdout) == (mode, 0, "spawned\n")
    assert _wait_gone(marker) == []


def test_daemon_does_not_outlive_the_timeout(mode: str) -> None:
    marker = "daemon_" + uuid.uuid4().hex
    started = time.monotonic()
    result = sandbox.run_python(_DAEMON.format(marker=marker) + "while True:\n    pass\n", timeout_s=2.0)
    assert result.mode == mode and result.timed_out and result.killed == "wall-clock timeout after 2.0 s"
    assert result.stdout == "spawned\n" and time.monotonic() - started < KILLED_WITHIN_S
    assert _wait_gone(marker) == []


_FORK_EXEC = (
    "import _posixsubprocess, os\n"
    "r, w = os.pipe()\n"
    "args = [b'/bin/sh', b'-c', {command!r}]\n"
    "base = [args, [b'/bin/sh'], True, (), None, None, -1, -1, -1, -1, -1, -1, r, w, True, False, -1,\n"
    "        None, None, None, -1, None, False]\n"
    "for n in (23, 22, 21):\n"
    "    try:\n"
    "        pid = _posixsubprocess.fork_exec(*base[:n])\n"
    "        break\n"
    "    except TypeError:\n"
    "        continue\n"
    "os.close(w)\n"
    "print('status', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
)


def test_posixsubprocess_fork_exec_is_contained_too(
    mode: str, tmp_path: Path, listener: tuple[int, list[str]], victim: subprocess.Popen[bytes]
) -> None:
    port, accepted = listener
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    target = tmp_path / "escaped.txt"
    command = (
        f"cat {secret}; echo x > {target}; kill -9 {victim.pid}; "
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\"; echo done"
    )
    result = sandbox.run_python(_FORK_EXEC.format(command=command.encode()))
    assert result.mode == mode
    assert result.stdout.endswith("done\nstatus 0\n"), result
    assert "TOPSECRET" not in result.stdout and "No such file" in result.stderr
    assert not target.exists() and victim.poll() is None and accepted == []


def test_fork_bomb_is_contained_and_reaped(mode: str) -> None:
    if sandbox.isolation().userns and ROOT:
        pytest.skip("this variant keeps the runner's uid, here 0, which RLIMIT_NPROC does not bind; the bomb runs "
                    "for an unprivileged runner in test_sandbox_unprivileged.py")  # fmt: skip
    marker = "forkbomb_" + uuid.uuid4().hex
    loop = "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    started = time.monotonic()
    result = sandbox.run_python(f"import os\n{marker} = 1\n{loop}", timeout_s=3.0)
    assert result.mode == mode and result.timed_out and time.monotonic() - started < KILLED_WITHIN_S
    assert _wait_gone(marker) == []


def test_unbounded_allocation_hits_the_memory_limit(mode: str) -> None:
    result = sandbox.run_python("x = []\nwhile True:\n    x.append(bytearray(50_000_000))", timeout_s=20.0)
    assert (result.mode, result.exit_code) == (mode, 1) and "MemoryError" in result.stderr


def test_infinite_loop_is_killed_at_the_deadline(mode: str) -> None:
    started = time.monotonic()
    result = sandbox.run_python("while True:\n    pass", timeout_s=1.5)
    assert result.mode == mode and result.exit_code is None and result.timed_out
    assert time.monotonic() - started < KILLED_WITHIN_S


def test_one_file_stops_at_the_file_size_limit(mode: str) -> None:
    code = (
        "import os\nf = open('big', 'wb')\ntry:\n    while True:\n        f.write(b'x' * 1048576)\n"
        "        f.flush()\nexcept OSError as e:\n    print('stopped', os.path.getsize('big'))"
    )
    result = sandbox.run_python(code, timeout_s=10.0)
    assert result.mode == mode and result.stdout.startswith("stopped ")
    assert int(result.stdout.split()[1]) <= sandbox.FILE_SIZE_LIMIT_BYTES


def test_output_flood_is_capped(mode: str) -> None:
    result = sandbox.run_python("while True:\n    print('x' * 1000)", timeout_s=10.0)
    assert result.mode == mode and result.killed == f"output exceeded {sandbox.OUTPUT_CAP_BYTES} bytes"
    assert len(result.stdout) <= sandbox.OUTPUT_CAP_BYTES


def test_environment_is_scrubbed(mode: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = "hf_FAKE" + uuid.uuid4().hex
    monkeypatch.setenv("HF_TOKEN", fake)
    monkeypatch.setenv("SERVEPACK_TEST_SECRET", fake)
    code = (
        "import os\nprint(sorted(os.environ))\n"
        "for p in ('/proc/self/environ', '/proc/1/environ'):\n"
        "    try:\n        print(open(p).read())\n    except OSError as exc:\n        print(type(exc).__name__)\n"
    )
    result = sandbox.run_python(code)
    assert (result.mode, result.exit_code) == (mode, 0)
    names = "['HOME', 'LANG', 'LC_ALL', 'PATH', 'PYTHONDONTWRITEBYTECODE', 'PYTHONIOENCODING', 'TMPDIR']"
    assert result.stdout == f"{names}\nFileNotFoundError\nFileNotFoundError\n"
    shell = sandbox.run_shell("python3 -c 'import os; print(dict(os.environ))'", cwd=tmp_path, allowed=["python3"])
    assert shell.exit_code == 0 and "HOME" in shell.stdout
    assert fake not in shell.stdout + shell.stderr and "HF_TOKEN" not in shell.stdout


def test_shell_works_on_its_directory_and_sees_nothing_else(mode: str, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("TOPSECRET")
    work = tmp_path / "ws"
    work.mkdir()
    (work / "notes.txt").write_text("alpha\nbeta\n")
    (work / "old.txt").write_text("gone soon")
    allowed = ["cat", "grep", "echo", "ls", "rm", "mkdir"]
    ok = sandbox.run_shell("grep beta notes.txt && echo made > out.txt && rm old.txt && mkdir -p d/e", cwd=work,
                           allowed=allowed)  # fmt: skip
    assert (ok.mode, ok.stdout, ok.exit_code) == (mode, "beta\n", 0)
    assert sorted(os.listdir(work)) == ["d", "notes.txt", "out.txt"]
    assert (work / "out.txt").read_text() == "made\n" and (work / "d" / "e").is_dir()
    assert (tmp_path / "secret.txt").read_text() == "TOPSECRET"


def test_disk_quota_stops_many_files_and_is_reported(mode: str, tmp_path: Path) -> None:
    quota = 3 * 1024 * 1024
    code = (
        "import os\nn = 0\ntry:\n    while True:\n"
        "        with open(f'f{n}', 'wb') as f:\n            f.write(b'x' * 262144)\n        n += 1\n"
        "except OSError as exc:\n    print('stopped', n, exc.strerror)\n"
    )
    result = sandbox.run_python(code, timeout_s=10.0, disk_quota_bytes=quota)
    assert result.mode == mode and result.disk_full and result.exit_code == 0
    stopped, count, *why = result.stdout.split()
    assert stopped == "stopped" and int(count) * 262144 <= quota and " ".join(why) == "No space left on device"
    work = tmp_path / "ws"
    work.mkdir()
    flood = sandbox.run_shell("yes > a; yes > b; yes > c", cwd=work, allowed=["yes"], disk_quota_bytes=quota)
    assert flood.mode == mode and flood.disk_full and flood.exit_code != 0
    assert "No space left on device" in flood.stderr
    synced = sum(p.stat().st_size for p in work.iterdir())
    assert 0 < synced <= quota and sorted(os.listdir(work)) == ["a", "b", "c"]


def test_hard_links_cannot_multiply_the_quota_on_the_host(mode: str, tmp_path: Path) -> None:
    quota = 2 * 1024 * 1024
    (tmp_path / "keep.txt").write_text("before")
    code = "import os; open('one', 'wb').write(b'x' * 1048576); [os.link('one', f'l{i}') for i in range(50)]"
    result = sandbox.run_shell(f'python3 -c "{code}"', cwd=tmp_path, allowed=["python3"], disk_quota_bytes=quota)
    assert result.mode == mode and result.exit_code == 0 and result.disk_full
    assert "workspace changes discarded" in result.stderr
    assert os.listdir(tmp_path) == ["keep.txt"]


def test_a_workspace_over_the_quota_is_not_run(mode: str, tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 300_000)
    result = sandbox.run_shell("echo hi", cwd=tmp_path, allowed=["echo"], disk_quota_bytes=200_000)
    assert result.mode == mode and result.disk_full and result.stdout == ""
    assert result.killed == "the workspace holds 300000 bytes, over the disk quota of 200000"


def test_a_sleeping_process_is_gone_after_its_deadline(mode: str) -> None:
    marker = "stuck_" + uuid.uuid4().hex
    result = sandbox.run_python(f"import time\n{marker} = 1\ntime.sleep(30)", timeout_s=1.0)
    assert result.mode == mode and result.timed_out and result.exit_code is None
    assert _wait_gone(marker) == []


def test_sysv_shared_memory_is_closed(mode: str) -> None:
    """Segments outlive their process and count against no rlimit, so the namespace allows none."""
    if mode == "bwrap":
        pytest.skip("known limit: under bubblewrap the supervisor has no capability to close SysV IPC; such "
                    "memory lasts only until the run's deadline, when the IPC namespace goes")  # fmt: skip
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.shmget(0, 64 << 20, 0o1600), ctypes.get_errno(), libc.msgget(0, 0o1600), ctypes.get_errno())"
    )
    result = sandbox.run_python(code)
    assert (result.mode, result.exit_code, result.stdout) == (mode, 0, "-1 28 -1 28\n")  # ENOSPC
    plain = sandbox.run_python("import mmap\nm = mmap.mmap(-1, 1 << 20)\nm[:3] = b'abc'\nprint(m[:3])")
    assert plain.stdout == "b'abc'\n"  # private memory, which RLIMIT_AS bounds, still works


def test_long_and_odd_source_runs_or_fails_as_python_would(mode: str) -> None:
    """Source goes in on stdin, so 200 KB (over the 128 KiB limit of one argv string) is fine."""
    long = sandbox.run_python("x = 1  # " + "y" * 200_000 + "\nprint(x + 1)")
    assert (long.mode, long.exit_code, long.stdout) == (mode, 0, "2\n")
    nul = sandbox.run_python("print(1)\0")
    assert nul.exit_code == 1 and "null bytes" in nul.stderr
    surrogate = sandbox.run_python("print('\ud800'.encode('utf-8', 'replace'))")
    assert surrogate.exit_code == 0 and surrogate.stdout == "b'?'\n"


_NAMESPACES = r'''
import ctypes, os, subprocess, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def err(rc):
    return "made" if rc >= 0 else os.strerror(ctypes.get_errno())
print("unshare user", err(libc.unshare(0x10000000)))
print("unshare net", err(libc.unshare(0x40000000)))
print("unshare mount+pid", err(libc.unshare(0x20020000)))
print("unshare time", err(libc.unshare(0x80)))
print("setns", err(libc.setns(-1, 0)))
print("clone3", err(libc.syscall({clone3}, None, 0)))
pid = libc.syscall({clone}, 0x10000000 | 17, None, None, None, None)
if pid == 0:
    os._exit(0)
print("clone user", err(pid))
if pid > 0:
    os.waitpid(pid, 0)
if hasattr(os, "unshare"):
    try:
        os.unshare(os.CLONE_NEWUSER)
        print("os.unshare made")
    except OSError as exc:
        print("os.unshare", exc.strerror)
else:
    print("os.unshare Operation not permitted")  # Python < 3.12 has none; ctypes above is the same call
tool = subprocess.run(["/usr/bin/unshare", "--user", "--map-root-user", "id", "-u"], capture_output=True, text=True)
print("unshare tool", tool.returncode, tool.stdout.strip() or "-", tool.stderr.strip())
t = threading.Thread(target=print, args=("thread runs",))
t.start()
t.join()
print("child runs", subprocess.run([sys.executable, "-c", "pass"]).returncode)
'''


def test_no_new_namespace_can_be_made(mode: str) -> None:
    """In a user namespace of its own the code would hold every capability again: unshare, clone with a
    CLONE_NEW* flag and setns all fail with EPERM, by ctypes, os.unshare and the util-linux tool alike;
    clone3 is ENOSYS so libc falls back to clone, and threads and child processes still work."""
    import platform

    from servepack.smoke.sandbox.boot import SECCOMP

    if platform.machine() not in SECCOMP:
        pytest.skip(f"no seccomp table for {platform.machine()}: the sandbox refuses to run code there")
    _, _, _, clone, clone3 = SECCOMP[platform.machine()]
    result = sandbox.run_python(_NAMESPACES.format(clone=clone, clone3=clone3))
    eperm = "Operation not permitted"
    assert (result.mode, result.exit_code, result.stderr) == (mode, 0, "")
    assert result.stdout.splitlines() == [
        f"unshare user {eperm}", f"unshare net {eperm}", f"unshare mount+pid {eperm}", f"unshare time {eperm}",
        f"setns {eperm}", "clone3 Function not implemented", f"clone user {eperm}", f"os.unshare {eperm}",
        f"unshare tool 1 - unshare: unshare failed: {eperm}", "thread runs", "child runs 0"]


def test_loopback_state_matches_the_module_documentation(mode: str) -> None:
    """sandbox.py says: namespaces mode leaves the namespace's only device, lo, down; bubblewrap brings lo up in
    its fresh network namespace, where nothing but the code itself can listen."""
    code = (
        "import fcntl, socket, struct\n"
        "s = socket.socket()\n"
        "flags = struct.unpack('16sH', fcntl.ioctl(s.fileno(), 0x8913, struct.pack('16sH', b'lo', 0))[:18])[1]\n"
        "print([n for _, n in socket.if_nameindex()], 'up' if flags & 1 else 'down')\n"
    )
    result = sandbox.run_python(code)
    assert (result.mode, result.exit_code) == (mode, 0), result.stderr
    assert result.stdout == ("['lo'] down\n" if mode == "namespaces" else "['lo'] up\n")
    assert ("lo, down" if mode == "namespaces" else "brings lo up") in sandbox.__doc__.replace("\n", " ")
