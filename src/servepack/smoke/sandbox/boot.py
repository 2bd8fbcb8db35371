"""The supervisor that runs inside the sandbox's namespaces (see servepack.smoke.sandbox).

It is never imported: the host runs its source with `python -I -S -c SOURCE`, so it uses the standard
library only. Protocol, all over the pipes the host holds:

- stdin: one JSON line of configuration, then the workspace as an entry stream (one JSON header line per
  entry, a file's bytes after its header, then `{"t": "end"}`). It is unpacked into /work, a tmpfs of
  `quota` bytes: that is the disk quota.
- stdout: one JSON status line (exit code or signal, timeout, the code's captured stdout/stderr, disk use),
  then /work as an entry stream when `export` is set. The code never holds these pipes.
- stderr: this supervisor's own failures only.

With `setup` (namespaces mode) it is pid 1 of fresh user, mount, pid, network, IPC and UTS namespaces, root
of the user namespace: it builds the new root (a read-only tmpfs with read-only binds), pivots into it and
detaches the host's tree, then runs the code with every capability dropped and locked. Without `setup`
(bwrap mode) bubblewrap has built the root and dropped the capabilities already; this only checks that.
Either way the code runs in its own session under rlimits and a seccomp filter that refuses new namespaces;
at its exit or its deadline every other process of the sandbox is killed before /work is read back, so
nothing the code started outlives the call.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import resource
import select
import signal
import stat
import sys
import threading
import time
from typing import Any, BinaryIO

RDONLY, NOSUID, NODEV, REMOUNT, BIND, REC = 1, 2, 4, 32, 4096, 16384
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_SECUREBITS = 1, 4, 24, 28
PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 36, 38, 47, 4
# NOROOT and NO_CAP_AMBIENT_RAISE, each with its lock: uid 0 gains no capability at execve, ever.
SECUREBITS = 0x01 | 0x02 | 0x40 | 0x80
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
MAX_DEPTH = 64
# seccomp: the code may not make a namespace (unshare, setns, clone with a CLONE_NEW* flag). In a new user
# namespace it would hold every capability again (over namespaces of its own, but the kernel's whole namespaced
# surface with them); new namespaces of other kinds would undo this sandbox's own (a network namespace with its
# loopback up). By machine: (AUDIT_ARCH, unshare, setns, clone, clone3); `clone`'s flags are its first argument
# on each. On another machine the code is not run (fail closed).
SECCOMP = {"x86_64": (0xC000003E, 272, 308, 56, 435), "aarch64": (0xC00000B7, 97, 268, 220, 435),
           "riscv64": (0xC00000F3, 97, 268, 220, 435), "ppc64le": (0xC0000015, 282, 350, 120, 435)}
CLONE_NEW_ANY = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE_NEWTIME = 0x80  # unshare only: in clone's flags these bits are the exit signal
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
RET_ALLOW, RET_ERRNO, EPERM, ENOSYS = 0x7FFF0000, 0x00050000, 1, 38
_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _enc(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


def _mount(src: str | None, dst: str, fs: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_enc(src), _enc(dst), _enc(fs), ctypes.c_ulong(flags), _enc(data)), f"mount {dst}")


def _bind(src: str, dst: str) -> None:
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    _mount(src, dst, None, BIND | REC)
    flags = os.statvfs(src).f_flag  # noexec and the atime flags must stay as they are (locked in a userns)
    kept = (flags & (NOSUID | NODEV | 8 | 1024 | 2048)) | ((1 << 21) if flags & 4096 else 0)
    nodev = 0 if src.startswith("/dev/") else NODEV
    _mount(None, dst, None, REMOUNT | BIND | RDONLY | NOSUID | nodev | kept)


def build_root(cfg: dict[str, Any]) -> None:
    """Namespaces mode: a read-only tmpfs root with read-only binds and a quota'd /work; pivot into it."""
    root = cfg["root"]
    for knob in ("shmall", "shmmni", "msgmni"):  # SysV segments would be memory outside every limit
        try:  # this IPC namespace's own limits; a user namespace may set them from Linux 5.17
            with open(f"/proc/sys/kernel/{knob}", "w") as f:
                f.write("0")
        except OSError:
            pass
    _mount("tmpfs", root, "tmpfs", NOSUID | NODEV, "size=4m,mode=0755")
    for path in cfg["ro_binds"]:
        _bind(path, root + path)
    for link, target in cfg["symlinks"]:
        os.makedirs(os.path.dirname(root + link), exist_ok=True)
        os.symlink(target, root + link)
    os.mkdir(root + "/work")
    _mount("tmpfs", root + "/work", "tmpfs", NOSUID | NODEV, f"size={cfg['quota']},nr_inodes={cfg['inodes']},mode=0755")
    _mount(None, root, None, REMOUNT | RDONLY | NOSUID | NODEV)
    os.chdir(root)
    number = PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        os.chroot(".")  # the code keeps no capability, so it cannot chroot its way back out
    else:
        _check(_libc.syscall(number, b".", b"."), "pivot_root")
        _check(_libc.umount2(b".", MNT_DETACH), "detach the host's root")
    os.chdir("/")


def _drop_bounding_set() -> None:
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: past the last
            _check(-1, f"drop capability {cap} from the bounding set")


def _drop_capabilities() -> None:
    _check(_libc.prctl(PR_SET_SECUREBITS, SECUREBITS, 0, 0, 0), "lock securebits")
    _drop_bounding_set()
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    _clear_capabilities()


def _clear_capabilities() -> None:
    _check(_libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), (_CapData * 2)()), "capset")
    _assert_no_capabilities()


def _assert_no_capabilities() -> None:
    data = (_CapData * 2)()
    _check(_libc.capget(ctypes.byref(_CapHeader(0x20080522, 0)), data), "capget")
    if any(d.effective or d.permitted or d.inheritable for d in data):
        raise PermissionError("the sandboxed process still holds capabilities")


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def namespace_filter(machine: str) -> list[tuple[int, int, int, int]]:
    """The seccomp program (BPF: code, jt, jf, k) refusing new namespaces with EPERM; clone3 gets ENOSYS, so
    libc falls back to clone, whose flags the filter can read (clone3 keeps them in memory it cannot)."""
    if machine not in SECCOMP:
        raise OSError(f"no seccomp table for {machine}; the sandbox cannot forbid new namespaces here")
    arch, unshare, setns, clone, clone3 = SECCOMP[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, deny, nosys = 13, 14, 15  # indexes of the three returns below
    prog = [
        (ld, 0, 0, 4),  # 0: seccomp_data.arch
        (jeq, 0, deny - 2, arch),  # 1: another ABI (i386 on x86_64): refused outright
        (ld, 0, 0, 0),  # 2: seccomp_data.nr
        (jge, deny - 4, 0, 0x40000000 if machine == "x86_64" else 0xFFFFFFFF),  # 3: x32 numbers
        (jeq, 0, 3, unshare),  # 4
        (ld, 0, 0, 16),  # 5: args[0], low word (these machines are little-endian)
        (jset, deny - 7, 0, CLONE_NEW_ANY | CLONE_NEWTIME),  # 6
        (ret, 0, 0, RET_ALLOW),  # 7: unshare of something else (CLONE_FS, CLONE_FILES)
        (jeq, deny - 9, 0, setns),  # 8
        (jeq, nosys - 10, 0, clone3),  # 9
        (jeq, 0, allow - 11, clone),  # 10
        (ld, 0, 0, 16),  # 11: clone's flags
        (jset, deny - 13, allow - 13, CLONE_NEW_ANY),  # 12
        (ret, 0, 0, RET_ALLOW),  # 13
        (ret, 0, 0, RET_ERRNO | EPERM),  # 14
        (ret, 0, 0, RET_ERRNO | ENOSYS),  # 15
    ]
    return prog


def _forbid_namespaces() -> None:
    """Install `namespace_filter` on this process (needs no_new_privs); inherited by everything it starts."""
    prog = namespace_filter(os.uname().machine)
    insns = (_SockFilter * len(prog))(*(_SockFilter(*i) for i in prog))
    fprog = _SockFprog(len(prog), insns)
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp filter")


# --- entry streams -------------------------------------------------------------------------------------


def _read_line(stream: BinaryIO, limit: int = 1 << 16) -> dict[str, Any]:
    line = stream.readline(limit)
    if not line.endswith(b"\n"):
        raise ValueError("truncated entry stream")
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError("entry header is not an object")
    return value


def _parts(rel: str) -> list[str]:
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") or "\0" in p for p in parts) or len(parts) > MAX_DEPTH:
        raise ValueError(f"bad entry path {rel!r}")
    return parts


def unpack(stream: BinaryIO, dest: str) -> None:
    """Materialise the host's workspace stream under dest (a fresh directory we own)."""
    while True:
        head = _read_line(stream)
        kind = head.get("t")
        if kind == "end":
            return
        path = os.path.join(dest, *_parts(str(head["p"])))
        mode = int(head.get("m", 0o644)) & 0o777
        if kind == "d":
            os.mkdir(path, mode | 0o700)
        elif kind == "l":
            os.symlink(str(head["l"]), path)
        elif kind == "f":
            size = int(head["n"])
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode | 0o600), "wb") as out:
                while size > 0:
                    chunk = stream.read(min(size, 1 << 20))
                    if not chunk:
                        raise ValueError("truncated file in entry stream")
                    out.write(chunk)
                    size -= len(chunk)
        else:
            raise ValueError(f"unknown entry type {kind!r}")


def pack(src: str, out: BinaryIO, limit: int) -> None:
    """Write src as an entry stream, parents first, never following a link; at most `limit` file bytes."""
    total = 0
    stack: list[tuple[str, int]] = [("", 0)]
    while stack:
        rel, depth = stack.pop()
        with os.scandir(os.path.join(src, rel) if rel else src) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            name = entry.name if not rel else f"{rel}/{entry.name}"
            st = entry.stat(follow_symlinks=False)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 >= MAX_DEPTH:
                    raise ValueError(f"directories nested deeper than {MAX_DEPTH} levels")
                _header(out, {"t": "d", "p": name, "m": mode})
                stack.append((name, depth + 1))
            elif stat.S_ISLNK(st.st_mode):
                _header(out, {"t": "l", "p": name, "l": os.readlink(entry.path)})
            elif stat.S_ISREG(st.st_mode):
                total += st.st_size
                if total > limit:
                    raise ValueError(f"the workspace holds more than {limit} bytes (hard links count each time)")
                fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
                with open(fd, "rb") as f:
                    data = f.read(st.st_size + 1)
                _header(out, {"t": "f", "p": name, "m": mode, "n": len(data)})
                out.write(data)
    _header(out, {"t": "end"})


def _chown_tree(top: str, uid: int) -> None:
    os.chown(top, uid, uid)
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


def _header(out: BinaryIO, head: dict[str, Any]) -> None:
    out.write(json.dumps(head).encode() + b"\n")


# --- running the code ----------------------------------------------------------------------------------


def _child(cfg: dict[str, Any], in_r: int, out_w: int, err_w: int) -> None:
    """In the forked child: stdio, own session, no capabilities, no new privileges, rlimits, exec."""
    try:
        os.setsid()
        os.dup2(in_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        if cfg["uid"] is not None:  # real root: a fresh uid, the bounding set emptied first
            _check(_libc.prctl(PR_SET_SECUREBITS, SECUREBITS, 0, 0, 0), "lock securebits")
            _drop_bounding_set()
            _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
            os.setgroups([])
            os.setresgid(cfg["uid"], cfg["uid"], cfg["uid"])
            os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
            _clear_capabilities()
        elif cfg["setup"]:  # root of a user namespace: stay uid 0 there, with nothing
            _drop_capabilities()
        else:  # bubblewrap in a user namespace dropped them already
            _assert_no_capabilities()
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        _forbid_namespaces()
        for name, value in cfg["rlimits"]:
            resource.setrlimit(getattr(resource, name), (value, value))
        os.chdir("/work")
        os.umask(0o022)
        os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])
    except BaseException as exc:  # nothing may run past a failed drop
        os.write(2, f"servepack-sandbox: cannot start: {exc}\n".encode())
    os._exit(126)


def _feed(fd: int, data: bytes) -> None:
    """The code's stdin (Python source for run_python, which may exceed the 128 KiB limit of one argument)."""
    try:
        with open(fd, "wb") as f:
            f.write(data)
    except OSError:
        pass


def _kill_all() -> None:
    """Kill every other process of the sandbox (we are pid 1 or their subreaper) and reap them."""
    for _ in range(1000):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            break
        _reap()
        time.sleep(0.002)
    _reap()


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def supervise(cfg: dict[str, Any]) -> dict[str, Any]:
    """Run the code; capture capped output; stop it at its deadline; kill whatever it left behind."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    timeout_s, cap = float(cfg["timeout_s"]), int(cfg["output_cap"])
    deadline = time.monotonic() + timeout_s
    child = os.fork()
    if child == 0:
        _child(cfg, in_r, out_w, err_w)
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    threading.Thread(target=_feed, args=(in_w, cfg.get("stdin", "").encode()), daemon=True).start()
    buffers = {out_r: bytearray(), err_r: bytearray()}
    open_fds = [out_r, err_r]
    status: int | None = None
    killed: str | None = None
    exited_at = 0.0
    while status is None or (open_fds and time.monotonic() - exited_at < 0.2):
        now = time.monotonic()
        if now >= deadline:
            killed = f"wall-clock timeout after {timeout_s:.1f} s"
            break
        ready, _, _ = select.select(open_fds, [], [], min(0.05, deadline - now))
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                buffers[fd] += chunk
            else:
                open_fds.remove(fd)
        if sum(len(b) for b in buffers.values()) > cap:
            killed = f"output exceeded {cap} bytes"
            break
        if status is None:
            pid, raw = os.waitpid(child, os.WNOHANG)
            if pid == child:
                status, exited_at = raw, time.monotonic()
    _kill_all()
    out, err = (bytes(buffers[fd][:cap]).decode("utf-8", "replace") for fd in (out_r, err_r))
    result: dict[str, Any] = {"stdout": out, "stderr": err, "timed_out": killed is not None and "timeout" in killed,
                              "killed": killed, "exit_code": None}  # fmt: skip
    if killed is None and status is not None:
        result["exit_code"] = os.waitstatus_to_exitcode(status)
    vfs = os.statvfs("/work")
    result["disk_free"] = vfs.f_bavail * vfs.f_frsize
    result["inodes_free"] = vfs.f_favail
    return result


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # pid 1 ignores signals it has no handler for
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    cfg = _read_line(stdin, 1 << 26)
    if cfg["setup"]:
        build_root(cfg)
    _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "not dumpable")
    _check(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "subreaper")
    unpack(stdin, "/work")
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)  # keep fds 0-2 taken, so the code's pipes never land on them
    os.close(null)
    if cfg["uid"] is not None:
        _chown_tree("/work", int(cfg["uid"]))
    result = supervise(cfg)
    try:
        if cfg["export"]:
            stream = io.BytesIO()
            pack("/work", stream, int(cfg["quota"]))
            stdout.write(json.dumps(result).encode() + b"\n" + stream.getvalue())
        else:
            stdout.write(json.dumps(result).encode() + b"\n")
    except (OSError, ValueError) as exc:
        result["export_error"] = str(exc)
        stdout.write(json.dumps(result).encode() + b"\n")
    stdout.flush()


if __name__ == "__main__":
    main()
