"""Issue 25 item 7: a crash Python prints itself — a background thread's uncaught exception
(`threading.excepthook`), or an exception past every handler (`sys.excepthook`) — passes the one redaction as every
error servepack shows (`redact.scrub_shown`, hooks installed by `cli.main.main`): the run's registered keys
and every value a name marks are gone, and the crash is still shown (the thread, the exception, the traceback).

The wrong answer (before): Python's own `Exception in thread …` traceback on stderr with the key in clear."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

import servepack.plan as plan_mod
from servepack import store
from servepack.cli import main as main_mod
from servepack.errors import EngineError
from servepack.redact import REDACTED

KEY = "sk-live-7f3a9c2e10"
SIX = "Zq8~wR"  # a registered value long enough (4) to be removed from what is shown


@pytest.fixture
def own_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's own hooks for the test, as a command starts with (not pytest's, which keep a thread's crash to
    themselves); whatever `main()` installs is put back after it."""
    monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)


def _crash_in_thread(message: str) -> None:
    def body() -> None:
        raise RuntimeError(message)

    t = threading.Thread(target=body, name="sampler-x")
    t.start()
    t.join()


def test_a_thread_crash_inside_a_run_shows_no_key(tiny_pack: Path, tmp_path: Path, own_hooks: None,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    pack = tiny_pack
    pack.write_text(pack.read_text().replace("jinja = true\n", f'jinja = true\napi-key = "{KEY}"\n', 1))

    def get_engine(*args: object, **kwargs: object) -> None:  # inside the run: the preset's key is registered
        _crash_in_thread(f"sampler saw {KEY}; argv ['llama-server', '--api-key', 'k9']")
        raise EngineError("the engine is gone")

    monkeypatch.setattr(plan_mod, "get_engine", get_engine)
    monkeypatch.setattr(sys, "argv", ["servepack", "run", str(pack), "--out", str(tmp_path / "run"), "--no-smoke"])
    with pytest.raises(SystemExit) as stop:
        main_mod.main()
    assert stop.value.code == EngineError.exit_code  # the run's own error is unchanged
    err = capsys.readouterr().err
    assert KEY not in err and "'k9'" not in err
    # the thread's failure is still visible: its name, the traceback, the exception with its message redacted
    assert "Exception in thread sampler-x:" in err and "Traceback (most recent call last)" in err
    assert f"RuntimeError: sampler saw {REDACTED}; argv ['llama-server', '--api-key', '{REDACTED}']" in err
    assert "servepack: error: the engine is gone" in err


def test_the_hooks_scrub_by_registered_value_and_by_name(own_hooks: None,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    store.register_secrets([SIX])
    main_mod.install_crash_hooks()
    _crash_in_thread(f"a value {SIX} and a line\nadmin_key: k9")
    err = capsys.readouterr().err
    assert SIX not in err and "admin_key: k9" not in err
    assert f"RuntimeError: a value {REDACTED} and a line" in err and f"admin_key: {REDACTED}" in err
    assert err.startswith("Exception in thread sampler-x:\nTraceback (most recent call last)")

    try:
        raise ValueError(f"nothing caught this: {SIX}")
    except ValueError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    err = capsys.readouterr().err
    assert SIX not in err and f"ValueError: nothing caught this: {REDACTED}" in err and "Traceback" in err


def test_a_thread_that_exits_says_nothing(own_hooks: None, capsys: pytest.CaptureFixture[str]) -> None:
    main_mod.install_crash_hooks()
    t = threading.Thread(target=sys.exit, args=(3,))
    t.start()
    t.join()
    assert capsys.readouterr().err == ""
