"""Escape attempts against the sandbox, in both containment modes; each must be contained."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from servepack.smoke import sandbox
from servepack.smoke.sandbox import Isolation, SandboxResult

AUDIT = Isolation("audit", (), False, "namespaces disabled for this test")


@pytest.fixture(params=["namespaces", "audit"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "namespaces":
        if sandbox.isolation().mode != "namespaces":
            pytest.skip(f"namespaces unavailable here: {sandbox.isolation().reason}")
    else:
        monkeypatch.setattr(sandbox, "isolation", lambda: AUDIT)
    return str(request.param)


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


def test_normal_code_prints_exact_stdout(mode: str) -> None:
    result = sandbox.run_python("print('hello', 6 * 7)\nprint(sorted({3, 1, 2}))")
    assert result == SandboxResult("hello 42\n[1, 2, 3]\n", "", 0, False, None, None)


def test_reading_a_secret_outside_the_work_dir_fails(mode: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-" + uuid.uuid4().hex)
    result = sandbox.run_python(f"print(open({str(secret)!r}).read())")
    assert "TOPSECRET" not in result.stdout
    assert result.exit_code == 1
    assert "Error" in result.stderr
    passwd = sandbox.run_python("print(open('/etc/passwd').read())")
    assert "root:" not in passwd.stdout and passwd.exit_code == 1


def test_writing_outside_the_work_dir_fails(mode: str, tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    result = sandbox.run_python(f"open({str(target)!r}, 'w').write('x')")
    assert result.exit_code == 1
    assert not target.exists()


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A loopback TCP listener recording every connection it accepts."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    accepted: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, addr = server.accept()
            except (TimeoutError, OSError):
                continue
            accepted.append(f"{addr[0]}:{addr[1]}")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join(timeout=5)
    server.close()


def test_socket_to_a_loopback_listener_is_blocked(mode: str, listener: tuple[int, list[str]]) -> None:
    port, accepted = listener
    code = (
        f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=3)\nprint('connected')"
    )
    result = sandbox.run_python(code)
    assert "connected" not in result.stdout
    if mode == "audit":
        assert result.refused is not None and "network-capable" in result.refused
    else:
        assert result.exit_code == 1 and "unreachable" in result.stderr
    disguised = sandbox.run_python(
        f"m = __import__('soc' + 'ket')\nm.create_connection(('127.0.0.1', {port}))"
    )
    assert disguised.exit_code != 0 or disguised.refused is not None
    assert accepted == []


def test_fork_bomb_is_contained_and_reaped(mode: str) -> None:
    marker = "forkbomb_" + uuid.uuid4().hex
    loop = "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    code = f"import os\n{marker} = 1\n{loop}"
    started = time.monotonic()
    result = sandbox.run_python(code, timeout_s=3.0)
    assert time.monotonic() - started < 15.0
    assert result.timed_out or result.killed is not None or result.exit_code not in (0, None)
    deadline = time.monotonic() + 5.0
    while _survivors(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _survivors(marker) == []


def test_unbounded_allocation_hits_the_memory_limit(mode: str) -> None:
    started = time.monotonic()
    result = sandbox.run_python("x = []\nwhile True:\n    x.append(bytearray(50_000_000))", timeout_s=20.0)
    assert time.monotonic() - started < 15.0
    assert result.exit_code == 1 and "MemoryError" in result.stderr


def test_infinite_loop_is_killed_at_the_deadline(mode: str) -> None:
    started = time.monotonic()
    result = sandbox.run_python("while True:\n    pass", timeout_s=1.5)
    elapsed = time.monotonic() - started
    assert result.exit_code is None and result.killed is not None
    assert elapsed < 8.0


def test_huge_file_stops_at_the_size_limit(mode: str) -> None:
    code = (
        "import os\nf = open('big', 'wb')\ntry:\n    while True:\n        f.write(b'x' * 1048576)\n"
        "        f.flush()\nexcept OSError as e:\n    print('stopped', os.path.getsize('big'))"
    )
    result = sandbox.run_python(code, timeout_s=10.0)
    assert result.stdout.startswith("stopped ")
    assert int(result.stdout.split()[1]) <= sandbox.FILE_SIZE_LIMIT_BYTES


def test_output_flood_is_capped(mode: str) -> None:
    result = sandbox.run_python("while True:\n    print('x' * 1000)", timeout_s=10.0)
    assert result.killed is not None and "output" in result.killed
    assert len(result.stdout) <= sandbox.OUTPUT_CAP_BYTES


def test_environment_is_scrubbed(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVEPACK_TEST_TOKEN", "leak-me-not")
    result = sandbox.run_python("import os\nprint(sorted(os.environ))")
    assert result.exit_code == 0
    assert "SERVEPACK_TEST_TOKEN" not in result.stdout and "HOME" in result.stdout


def test_shell_sees_only_its_cwd(mode: str, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("TOPSECRET")
    work = tmp_path / "ws"
    work.mkdir()
    (work / "notes.txt").write_text("alpha\nbeta\n")
    allowed = ["cat", "grep", "echo", "ls"]
    ok = sandbox.run_shell("grep beta notes.txt && echo made > out.txt", cwd=work, allowed=allowed)
    assert ok.stdout == "beta\n" and ok.exit_code == 0
    assert (work / "out.txt").read_text() == "made\n"
    for attempt in ("cat ../secret.txt", f"cat {tmp_path}/secret.txt", "cat /etc/passwd"):
        result = sandbox.run_shell(attempt, cwd=work, allowed=allowed)
        assert "TOPSECRET" not in result.stdout and "root:" not in result.stdout
        assert result.refused is not None or result.exit_code != 0


def test_shell_huge_file_and_endless_output_are_stopped(mode: str, tmp_path: Path) -> None:
    result = sandbox.run_shell("yes > big", cwd=tmp_path, allowed=["yes"], timeout_s=10.0)
    assert result.exit_code != 0
    assert (tmp_path / "big").stat().st_size <= sandbox.FILE_SIZE_LIMIT_BYTES
    flood = sandbox.run_shell("yes", cwd=tmp_path, allowed=["yes"], timeout_s=10.0)
    assert flood.killed is not None and len(flood.stdout) <= sandbox.OUTPUT_CAP_BYTES


def test_namespaced_shell_has_no_network(listener: tuple[int, list[str]], tmp_path: Path) -> None:
    if sandbox.isolation().mode != "namespaces":
        pytest.skip(f"namespaces unavailable here: {sandbox.isolation().reason}")
    port, accepted = listener
    script = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('connected')"
    result = sandbox.run_shell(f'python3 -c "{script}"', cwd=tmp_path, allowed=["python3"])
    assert "connected" not in result.stdout and result.exit_code == 1
    assert accepted == []
