"""The attack set again, with the runner a real unprivileged user (uid 65534), as most users run servepack.

Modes: `namespaces` (unshare --map-root-user: a user namespace owned by uid 65534) and `bwrap` (unprivileged
bubblewrap). This is the path where the code keeps the runner's own uid minus every capability, so it is
also where the fork bomb must be bounded by RLIMIT_NPROC. Needs root (to drop to 65534) and a system
Python that uid 65534 can run; the sandbox module needs nothing but the standard library.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from system_deps import require

SRC = Path(__file__).resolve().parents[3] / "src"
PYTHON = "/usr/bin/python3"
NOBODY = 65534

DRIVER = r"""
import json, os, socket, subprocess, sys, threading, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from servepack.smoke import sandbox
scratch, marker = Path(sys.argv[2]), sys.argv[3]
out = {"isolation": sandbox.isolation().mode, "userns": sandbox.isolation().userns, "uid": os.getuid()}
victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(4); server.settimeout(0.2)
accepted = []
def serve():
    while server.fileno() != -1:
        try:
            accepted.append(server.accept()[1])
        except OSError:
            continue
threading.Thread(target=serve, daemon=True).start()
port = server.getsockname()[1]
work = scratch / "ws"
work.mkdir()
run = lambda code, **kw: sandbox.run_python(code, **kw)
r = run(f"print(open('{scratch}/secret.txt').read())")
out["read"] = [r.exit_code, r.stdout, r.mode]
r = sandbox.run_shell(f"echo x > {scratch}/escaped.txt; echo x > ../escaped.txt; cat ../secret.txt", cwd=work,
                      allowed=["echo", "cat"])
out["write"] = [r.exit_code, r.stdout, (scratch / "escaped.txt").exists(), r.mode]
r = run(f"import os, signal\nos.kill({victim.pid}, signal.SIGKILL)")
out["signal"] = [r.exit_code, "ProcessLookupError" in r.stderr, victim.poll(), r.mode]
r = run(f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)")
out["tcp"] = [r.exit_code, r.stderr.strip().splitlines()[-1:], r.mode]
r = run("import os\nenv = '/proc/self/environ'\nprint(open(env).read() if os.path.exists(env) else dict(os.environ))")
out["env"] = [r.stdout, r.mode]
loop = "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
started = time.monotonic()
r = run(f"import os\n{marker} = 1\n{loop}", timeout_s=3.0)
out["forkbomb"] = [r.timed_out, round(time.monotonic() - started, 1), r.mode]
r = run("n = 0\ntry:\n    while True:\n        open(f'f{n}', 'wb').write(b'x' * 262144)\n        n += 1\n"
        "except OSError as e:\n    print(n, e.strerror)", disk_quota_bytes=2 * 1024 * 1024)
out["quota"] = [r.stdout, r.disk_full, r.mode]
r = run("import ctypes\nc = ctypes.CDLL(None, use_errno=True)\nprint(c.shmget(0, 1 << 20, 0o1600), ctypes.get_errno())")
out["shm"] = [r.stdout, r.mode]
time.sleep(0.2)
out["victim_alive"] = victim.poll() is None
out["accepted"] = len(accepted)
victim.kill()
print(json.dumps(out))
"""


def _nobody_can_run(src: Path) -> str | None:
    if os.geteuid() != 0:
        return "needs root to run the driver as uid 65534"
    require("setpriv")  # util-linux: fails under make test when missing
    if not os.access(PYTHON, os.X_OK):
        return f"needs {PYTHON}"
    check = f"import os; os.listdir({str(src / 'servepack' / 'smoke')!r})"
    as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", PYTHON, "-c", check]
    probe = subprocess.run(as_nobody, capture_output=True)
    return None if probe.returncode == 0 else f"uid {NOBODY} cannot read {src}"


@pytest.fixture
def nobody_src() -> Iterator[Path]:
    """servepack's sources where uid 65534 can read them: a checkout under /root (mode 700) is not such a place."""
    path = Path(tempfile.mkdtemp(prefix="servepack-src-"))
    os.chmod(path, 0o755)
    shutil.copytree(SRC / "servepack", path / "servepack", ignore=shutil.ignore_patterns("__pycache__"))
    for sub in [path, *path.rglob("*")]:
        os.chmod(sub, 0o755 if sub.is_dir() else 0o644)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory uid 65534 owns: it may read the secret and write there; its sandbox may not."""
    path = Path(tempfile.mkdtemp(prefix="servepack-nobody-"))
    os.chmod(path, 0o755)
    (path / "secret.txt").write_text("TOPSECRET")
    os.chmod(path / "secret.txt", 0o644)
    os.chown(path, NOBODY, NOBODY)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("mode", ["namespaces", "bwrap"])
def test_attack_set_as_an_unprivileged_runner(mode: str, scratch: Path, nobody_src: Path) -> None:
    why = _nobody_can_run(nobody_src)
    if why:
        pytest.skip(why)
    if mode == "bwrap":
        require("bwrap")  # bubblewrap: fails under make test (which installs it), skips elsewhere
    marker = "forkbomb_" + uuid.uuid4().hex
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "SERVEPACK_SANDBOX": mode, "HF_TOKEN": "hf_FAKE_SECRET"}
    proc = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", PYTHON, "-c", DRIVER, str(nobody_src),
         str(scratch), marker], capture_output=True, text=True, env=env, cwd=scratch, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"ran as uid {out['uid']} in sandbox mode {out['isolation']} (user namespace: {out['userns']})")
    assert (out["isolation"], out["userns"], out["uid"]) == (mode, True, NOBODY)
    assert out["read"] == [1, "", mode]
    assert out["write"][0] != 0 and out["write"][1:] == ["", False, mode]
    assert out["signal"] == [1, True, None, mode]
    assert out["tcp"][0] == 1 and out["tcp"][2] == mode
    assert "unreachable" in out["tcp"][1][0] or "refused" in out["tcp"][1][0]
    assert "hf_FAKE_SECRET" not in out["env"][0] and "HF_TOKEN" not in out["env"][0] and out["env"][1] == mode
    assert out["forkbomb"][0] is True and out["forkbomb"][1] < 60 and out["forkbomb"][2] == mode
    assert out["quota"][1] is True and out["quota"][0].split(maxsplit=1)[1].strip() == "No space left on device"
    assert int(out["quota"][0].split()[0]) * 262144 <= 2 * 1024 * 1024
    if mode == "namespaces":
        assert out["shm"] == ["-1 28\n", mode]  # ENOSPC: this IPC namespace allows no SysV segment
    assert out["victim_alive"] is True and out["accepted"] == 0
    assert not (scratch / "escaped.txt").exists() and not (scratch.parent / "escaped.txt").exists()
    leftover = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert leftover.stdout == ""
