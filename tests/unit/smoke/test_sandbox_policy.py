"""The sandbox's static parts: the shell allow-list, and which isolation is chosen (probes stubbed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from servepack.errors import UsageError
from servepack.smoke import sandbox
from servepack.smoke.sandbox import Isolation


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        ("ls; rm -rf x", "'rm' is not allowed"),
        ("ls | sh", "'sh' is not allowed"),
        ("ls && (curl http://127.0.0.1)", "'curl' is not allowed"),
        ("echo $(id)", "substitution"),
        ("echo `id`", "substitution"),
        ("ls\nrm x", "newlines"),
        ("FOO=1 ls", "assignments"),
        ("echo 'unterminated", "cannot parse"),
        ("", "empty"),
    ],
)
def test_shell_refusals_name_the_reason(command: str, fragment: str) -> None:
    refusal = sandbox.shell_refusal(command, ["ls", "echo", "cat"])
    assert refusal is not None and fragment in refusal


@pytest.mark.parametrize("command", ["ls -la", "cat a.txt | grep x > out; echo done", "echo 'rm -rf /'"])
def test_shell_allows_listed_commands(command: str) -> None:
    assert sandbox.shell_refusal(command, ["ls", "cat", "grep", "echo"]) is None


def test_no_allow_list_accepts_any_command_word() -> None:
    assert sandbox.shell_refusal("anything --goes", None) is None


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str | None]]:
    """Stubbed probes: mode -> None (works) or the reason it fails; bwrap found at /usr/bin/bwrap."""
    outcome: dict[str, str | None] = {"namespaces": None, "bwrap": None}
    monkeypatch.setattr(sandbox, "_probe", lambda iso: outcome[iso.mode])
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.delenv("SERVEPACK_SANDBOX", raising=False)
    sandbox.isolation.cache_clear()
    yield outcome
    sandbox.isolation.cache_clear()


def test_auto_prefers_namespaces(probes: dict[str, str | None]) -> None:
    assert sandbox.isolation().mode == "namespaces"


def test_without_user_namespaces_bwrap_is_used(probes: dict[str, str | None]) -> None:
    probes["namespaces"] = "unshare: unshare failed: Operation not permitted"
    iso = sandbox.isolation()
    assert (iso.mode, iso.bwrap) == ("bwrap", "/usr/bin/bwrap")


def test_without_user_namespaces_or_bwrap_the_executed_layer_is_refused(
    probes: dict[str, str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    probes["namespaces"] = "unshare: unshare failed: Operation not permitted"
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None if name == "bwrap" else f"/usr/bin/{name}")
    iso = sandbox.isolation()
    assert iso.mode == "none"
    assert "Operation not permitted" in iso.reason and "apt-get install bubblewrap" in iso.reason
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap") as err:
        sandbox.require()
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    refused = sandbox.run_python("print(1)")
    assert refused.refused == iso.reason and refused.exit_code is None and refused.mode == "none"
    shell = sandbox.run_shell("ls", cwd=Path("."), allowed=["ls"])
    assert shell.refused == iso.reason and shell.stdout == ""


def test_a_broken_bwrap_is_refused_with_its_error(probes: dict[str, str | None]) -> None:
    probes["namespaces"] = "no unshare binary (util-linux) on this host"
    probes["bwrap"] = "bwrap: setting up uid map: Permission denied"
    iso = sandbox.isolation()
    assert iso.mode == "none" and "setting up uid map" in iso.reason
    assert "it needs user namespaces, or to be setuid root" in iso.reason


def test_a_setuid_bwrap_without_user_namespaces_is_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-root runner: bwrap with a user namespace first, then (setuid bwrap) without one."""
    tried: list[tuple[str, bool, bool]] = []

    def probe(iso: Isolation) -> str | None:
        tried.append((iso.mode, iso.userns, iso.bwrap_userns))
        return None if (iso.mode, iso.bwrap_userns) == ("bwrap", False) else "No permission to create user namespace"

    monkeypatch.setattr(sandbox, "_probe", probe)
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    monkeypatch.delenv("SERVEPACK_SANDBOX", raising=False)
    sandbox.isolation.cache_clear()
    try:
        iso = sandbox.isolation()
    finally:
        sandbox.isolation.cache_clear()
    assert tried == [("namespaces", True, True), ("bwrap", True, True), ("bwrap", True, False)]
    assert (iso.mode, iso.userns, iso.bwrap_userns) == ("bwrap", True, False)
    argv = sandbox._launcher(iso, "/tmp/x", 1 << 20)
    assert "--unshare-user" not in argv and "--cap-add" not in argv and argv[argv.index("--size") + 1] == "1048576"


def test_setting_forces_bwrap_even_where_namespaces_work(
    probes: dict[str, str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVEPACK_SANDBOX", "bwrap")
    assert sandbox.isolation().mode == "bwrap"


def test_setting_off_refuses(probes: dict[str, str | None], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVEPACK_SANDBOX", "off")
    assert sandbox.isolation() == Isolation("none", "executed code is disabled by SERVEPACK_SANDBOX=off")


def test_bad_setting_is_a_usage_error(probes: dict[str, str | None], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVEPACK_SANDBOX", "audit")
    with pytest.raises(UsageError, match="SERVEPACK_SANDBOX=audit: choose one of auto, namespaces, bwrap, off"):
        sandbox.isolation()


def test_refused_commands_never_reach_the_probe(probes: dict[str, str | None]) -> None:
    probes["namespaces"] = probes["bwrap"] = "must not be probed"
    result = sandbox.run_shell("curl http://x", cwd=Path("."), allowed=["ls"])
    assert result.refused is not None and "'curl' is not allowed" in result.refused and result.mode == "policy"
