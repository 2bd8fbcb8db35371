"""The suite's thread guard (tests/thread_guard.py), run on a small suite of its own in a subprocess.

The case it was written for: the e2e session fixture was session-scoped, so its memory sampler kept sampling (and
fsyncing memory.jsonl) through every integration and unit test after tests/e2e. With the guard, the last test that
can see such a fixture errors, naming the fixture and its thread; a package-scoped one passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import servepack

TESTS = Path(__file__).resolve().parents[2]
SRC = Path(servepack.__file__).resolve().parents[1]

SAMPLER_FIXTURE = '''
import pytest
from servepack.host.memory import MemorySampler


@pytest.fixture(scope="{scope}")
def {name}():
    with MemorySampler(None) as s:
        yield s
'''

SUITE = {
    "pytest.ini": "[pytest]\n",
    # the old e2e shape: a session-scoped sampler defined for one directory only
    "a_wide/conftest.py": SAMPLER_FIXTURE.format(scope="session", name="wide"),
    "a_wide/test_a.py": "def test_first(wide):\n    pass\n\n\ndef test_last(wide):\n    pass\n",
    # the fixed shape: package scope, torn down after the package's last test
    "b_package/__init__.py": "",
    "b_package/conftest.py": SAMPLER_FIXTURE.format(scope="package", name="scoped"),
    "b_package/test_b.py": "def test_first(scoped):\n    pass\n\n\ndef test_last(scoped):\n    pass\n",
    "c_plain/test_c.py": '''
import threading

from servepack.host.memory import MemorySampler
from servepack.host.ticker import Ticker


def test_leaks_a_sampler():
    MemorySampler(None).start()


def test_stops_its_sampler():
    with MemorySampler(None) as s:
        s.mark("x")


def test_stops_it_a_little_late():
    s = MemorySampler(None).start()
    threading.Timer(0.2, s.stop).start()


def test_an_unrelated_thread_is_not_its_business():
    t = Ticker("other-thread", 0.05, lambda: None)
    t.start()
    threading.Timer(0.2, t.stop).start()


def test_after():
    pass
''',
    # a wider fixture whose teardown forgets its sampler
    "d_module/test_d.py": '''
import pytest
from servepack.host.memory import MemorySampler


@pytest.fixture(scope="module")
def forgetful():
    yield MemorySampler(None).start()


def test_uses_it(forgetful):
    pass
''',
}


def _run(tmp_path: Path) -> dict[str, tuple[str, str]]:
    for rel, text in SUITE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(SRC)]),
           "SERVEPACK_TEST_THREAD_GRACE_S": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "thread_guard", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "--junitxml", str(tmp_path / "out.xml"), "-q", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert (tmp_path / "out.xml").is_file(), done.stdout + done.stderr
    outcome: dict[str, tuple[str, str]] = {}
    for case in ET.parse(tmp_path / "out.xml").getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        bad = case.find("error")
        if bad is None:
            bad = case.find("failure")
        outcome[name] = ("passed", "") if bad is None else (bad.tag, bad.get("message", "") + (bad.text or ""))
    return outcome


def test_a_thread_left_running_fails_where_it_outlived_its_owner(tmp_path: Path) -> None:
    got = _run(tmp_path)
    errors = {k for k, (state, _) in got.items() if state != "passed"}
    # the session-scoped sampler outlives a_wide's tests; the leaking test leaks; the forgetful fixture forgets;
    # nothing else is blamed
    assert errors == {"test_a::test_last", "test_c::test_leaks_a_sampler", "test_d::test_uses_it"}, got
    wide = got["test_a::test_last"][1]
    assert "fixture 'wide' (session scope, defined at a_wide)" in wide and "servepack-memory" in wide
    assert "b_package/test_b.py::test_first" in wide
    leak = got["test_c::test_leaks_a_sampler"][1]
    assert "left servepack-memory running after its teardown" in leak
    forgot = got["test_d::test_uses_it"][1]
    assert "fixture 'forgetful' (module scope) was torn down, and its thread(s) servepack-memory still run" in forgot
    assert got["test_b::test_last"] == ("passed", "") and got["test_c::test_stops_it_a_little_late"] == ("passed", "")
    assert got["test_c::test_after"] == ("passed", "")
