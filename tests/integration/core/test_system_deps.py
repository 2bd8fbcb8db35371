"""scripts/system-deps, which `make run`, `make test` and so .ci/run use: installs what is missing, or says how.

Each case runs the real script with a PATH of stand-ins: `id` (root or not), `sudo`, `apt-get` (records its argv and
"installs" a package by putting its command on PATH) and the commands the profile checks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "system-deps"
TEST_COMMANDS = {"bwrap": "bubblewrap", "chromium": "chromium", "cmake": "cmake", "ip": "iproute2",
                 "unshare": "util-linux", "setpriv": "util-linux", "git": "git", "g++": "g++"}
REAL = ("bash", "env", "mktemp", "tail", "rm", "cat", "sh", "mkdir", "chmod", "true", "echo", "touch")


def _stub(bindir: Path, name: str, body: str) -> None:
    path = bindir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _host(tmp_path: Path, *, uid: int, have: set[str], sudo: str | None = None, apt_fails: bool = False,
          apt_prelude: str = "") -> Path:
    """A bin directory: the real tools the script itself uses, stand-ins for the rest."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in REAL:
        found = shutil.which(tool)
        assert found, tool
        (bindir / tool).symlink_to(found)
    for cmd in have:
        _stub(bindir, cmd, "exit 0")
    _stub(bindir, "id", f"echo {uid}")
    _stub(bindir, "python3", "exit 0")  # `import ensurepip, venv` works
    packages = {pkg: [c for c, p in TEST_COMMANDS.items() if p == pkg] for pkg in TEST_COMMANDS.values()}
    installs = "\n".join(f"    {pkg}) " + "; ".join(f"printf '#!/bin/sh\\n' > {bindir}/{c}; chmod +x {bindir}/{c}"
                                                    for c in cmds) + " ;;" for pkg, cmds in packages.items())
    _stub(bindir, "apt-get", f"""echo "apt-get $*" >> {tmp_path}/apt-calls
{apt_prelude}
[ "$1" = install ] || exit 0
{"echo 'E: Unable to locate package'; exit 100" if apt_fails else ""}
for p in "$@"; do
  case "$p" in
{installs}
  esac
done""")
    if sudo is not None:
        _stub(bindir, "sudo", sudo)
    return bindir


def _run(bindir: Path, profile: str = "test") -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(bindir), "PYTHON": "python3", "HOME": str(bindir.parent)}
    return subprocess.run([str(bindir / "bash"), str(SCRIPT), profile], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def _calls(tmp_path: Path) -> list[str]:
    calls = tmp_path / "apt-calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_nothing_missing_installs_nothing(tmp_path: Path) -> None:
    bindir = _host(tmp_path, uid=1000, have=set(TEST_COMMANDS))
    done = _run(bindir)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert _calls(tmp_path) == []


def test_as_root_the_missing_packages_are_installed_with_apt_get(tmp_path: Path) -> None:
    bindir = _host(tmp_path, uid=0, have=set(TEST_COMMANDS) - {"bwrap", "chromium"})
    done = _run(bindir)
    assert done.returncode == 0, done.stderr
    assert _calls(tmp_path) == ["apt-get install -y bubblewrap chromium"]
    assert done.stderr.strip().splitlines()[-1] == "system-deps: installed bubblewrap chromium"
    assert (bindir / "bwrap").exists() and (bindir / "chromium").exists()


def test_without_package_lists_it_updates_once_and_tries_again(tmp_path: Path) -> None:
    no_lists = (f'[ "$1" = update ] && touch {tmp_path}/updated\n'
                f'[ "$1" = install ] && [ ! -e {tmp_path}/updated ] && exit 100')
    bindir = _host(tmp_path, uid=0, have=set(TEST_COMMANDS) - {"cmake"}, apt_prelude=no_lists)
    done = _run(bindir)
    assert done.returncode == 0, done.stderr
    assert _calls(tmp_path) == ["apt-get install -y cmake", "apt-get update", "apt-get install -y cmake"]


def test_not_root_with_password_less_sudo_installs_through_sudo(tmp_path: Path) -> None:
    bindir = _host(tmp_path, uid=1000, have=set(TEST_COMMANDS) - {"ip"},
                   sudo=f'echo "sudo $*" >> {tmp_path}/sudo-calls\n[ "$1" = -n ] && shift\nexec "$@"')
    done = _run(bindir)
    assert done.returncode == 0, done.stderr
    assert _calls(tmp_path) == ["apt-get install -y iproute2"]
    assert (tmp_path / "sudo-calls").read_text().splitlines() == [
        "sudo -n true", "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y iproute2"]


@pytest.mark.parametrize("sudo", [None, "echo 'sudo: a password is required' >&2; exit 1"])
def test_not_root_without_sudo_stops_with_one_line_naming_the_command(tmp_path: Path, sudo: str | None) -> None:
    bindir = _host(tmp_path, uid=1000, have=set(TEST_COMMANDS) - {"bwrap", "chromium", "setpriv", "unshare"},
                   sudo=sudo)
    done = _run(bindir)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "servepack: error: make test needs the system packages bubblewrap chromium util-linux; run: "
        "sudo apt-get install -y bubblewrap chromium util-linux"]
    assert _calls(tmp_path) == []  # nothing tried, nothing skipped silently


def test_a_failed_install_is_an_error_with_the_last_lines_of_apt_get(tmp_path: Path) -> None:
    bindir = _host(tmp_path, uid=0, have=set(TEST_COMMANDS) - {"chromium"}, apt_fails=True)
    done = _run(bindir)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert "E: Unable to locate package" in done.stderr
    assert lines[-1].startswith("servepack: error: apt-get could not install chromium") and "Traceback" not in lines[-1]


def test_the_run_profile_asks_only_for_what_make_run_needs(tmp_path: Path) -> None:
    bindir = _host(tmp_path, uid=1000, have={"g++"})  # no bwrap, chromium, cmake …: not needed to run
    assert _run(bindir, "run").returncode == 0
    (bindir / "g++").unlink()
    done = _run(bindir, "run")
    assert done.returncode == 2 and done.stderr.strip().endswith("run: sudo apt-get install -y g++")


def test_without_apt_get_it_names_the_packages(tmp_path: Path) -> None:
    bindir = _host(tmp_path, uid=0, have=set(TEST_COMMANDS) - {"bwrap"})
    (bindir / "apt-get").unlink()
    done = _run(bindir)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert "bubblewrap" in done.stderr and "your package manager" in done.stderr


def test_the_makefile_and_ci_use_the_script() -> None:
    root = SCRIPT.parents[1]
    makefile = (root / "Makefile").read_text()
    assert "scripts/system-deps test" in makefile and "scripts/system-deps run" in makefile
    ci = (root / ".ci" / "run").read_text()
    assert "make test" in ci and "apt-get" not in ci  # one way to install, the Makefile's
    assert os.access(SCRIPT, os.X_OK)


def test_the_suite_asks_for_the_packages_the_script_installs() -> None:
    """tests/system_deps.py names each command's package as scripts/system-deps installs it for `make test`."""
    from system_deps import PACKAGES

    text = SCRIPT.read_text()
    block = text[text.index("test_needs=("):text.index(")", text.index("test_needs=("))]
    installed = {cmd: pkg for entry in re.findall(r'"([^"]+)"', block)
                 for cmds, pkg in [entry.split(":")] for cmd in cmds.split("|")}
    assert PACKAGES == {cmd: installed[cmd] for cmd in PACKAGES}
    assert set(PACKAGES) == {c for c in installed if c != "chromium-browser"}


_NEEDY = """
import pytest
from system_deps import missing, require

@pytest.mark.needs("bwrap")
def test_marked():
    pass

def test_called():
    require("ip", "chromium")

def test_python_package():
    missing("BFCL's data is not installed", "pip install bfcl-eval")
"""


@pytest.mark.parametrize("strict", [True, False])
def test_a_missing_package_fails_under_make_test_and_skips_elsewhere(tmp_path: Path, strict: bool) -> None:
    (tmp_path / "test_needy.py").write_text(_NEEDY)
    (tmp_path / "empty").mkdir()
    env = {"PATH": str(tmp_path / "empty"), "PYTHONPATH": str(SCRIPT.parents[1] / "tests"),
           **({"SERVEPACK_TEST_SYSTEM_DEPS": "required"} if strict else {})}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "system_deps", "-p", "no:cacheprovider", "-rA", "-q",
                           "-o", "markers=needs", str(tmp_path / "test_needy.py")], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120, check=False)
    out = done.stdout
    if strict:
        assert done.returncode == 1 and "2 failed, 1 error" in out, out  # the marker's failure is in setup
        assert "needs bwrap on PATH; `make test` provides it (apt-get install bubblewrap)" in out
        assert "needs ip, chromium on PATH; `make test` provides it (apt-get install chromium iproute2)" in out
    else:
        assert done.returncode == 0 and "3 skipped" in out and "failed" not in out, out
        assert "needs bwrap on PATH (apt-get install bubblewrap)" in out
