"""The sandbox's static checks: the shell allow-list and the audit-mode refusal of network-capable code."""

from __future__ import annotations

from pathlib import Path

import pytest

from servepack.smoke import sandbox


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


@pytest.mark.parametrize(
    ("code", "culprit"),
    [
        ("import socket", "socket"),
        ("from urllib.request import urlopen", "urllib.request"),
        ("import ctypes", "ctypes"),
        ("__import__('os')", "__import__"),
        ("x = 'subprocess'", "subprocess"),
        ("print(1)", None),
    ],
)
def test_network_capable_code_is_recognised(code: str, culprit: str | None) -> None:
    assert sandbox._network_capable(code) == culprit


def test_audit_mode_refuses_network_code_and_unrestricted_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "isolation", lambda: sandbox.Isolation("audit", (), False, "no unshare"))
    refused = sandbox.run_python("import socket")
    assert refused.refused is not None and refused.refused.startswith("no unshare")
    assert refused.exit_code is None and refused.stdout == ""
    shell = sandbox.run_shell("ls", cwd=Path("."), allowed=None)
    assert shell.refused is not None and "namespaces" in shell.refused
