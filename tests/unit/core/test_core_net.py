"""One loopback check: parse, resolve, every address loopback (no traffic: literals and /etc/hosts names only)."""

from __future__ import annotations

import re

import pytest

from servepack.errors import UsageError
from servepack.net import loopback_problem, require_loopback


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080", "http://127.9.9.9:1/v1", "http://[::1]:8080",
                                 "https://127.0.0.1", "http://localhost:8080"])
def test_loopback_urls_pass(url: str) -> None:
    assert loopback_problem(url) is None


@pytest.mark.parametrize(("url", "why"), [
    ("http://10.1.2.3:1", "resolves to 10.1.2.3, not loopback"),
    ("http://127.0.0.1@10.1.2.3:1", "user info"),
    ("http://user:pw@127.0.0.1:1", "user info"),
    ("file:///etc/passwd", "scheme must be http or https"),
    ("http://:8080", "no host"),
    ("http://127.0.0.1:99999", "not a URL"),
    ("http://[::ffff:10.0.0.1]:1", "not loopback"),
    ("http://0.0.0.0:1", "not loopback"),
])
def test_non_loopback_urls_are_refused_with_the_reason(url: str, why: str) -> None:
    problem = loopback_problem(url)
    assert problem is not None and why in problem


def test_require_loopback_names_the_flag() -> None:
    assert require_loopback("http://127.0.0.1:1/") == "http://127.0.0.1:1"
    with pytest.raises(UsageError, match=re.escape("--base-url http://10.0.0.1:1: servepack talks to servers")):
        require_loopback("http://10.0.0.1:1")


@pytest.mark.parametrize(("url", "shown", "at"), [
    ("http://127.0.0.1:9/\x1b[2J", "\\x1b", 19), ("http://127.0.0.1:9/\nHost: x", "\\n", 19),
    ("http://127.0.0.1:9/\r\n", "\\r", 19), ("http://127.0.0.1:9/\t", "\\t", 19), (" http://127.0.0.1:9", " ", 0),
    ("http://127.0.0.1\u202e:9", "\\u202e", 16), ("http://127.0.0.1:9/a b", " ", 20),
])
def test_a_space_or_control_character_in_a_url_is_refused_before_it_is_parsed(url: str, shown: str, at: int) -> None:
    """urlsplit drops tabs and newlines silently; the HTTP client raised InvalidURL on the rest (exit 70)."""
    assert loopback_problem(url) == f"a space or control character ({shown}) at position {at}; give the URL alone"
    with pytest.raises(UsageError) as err:
        require_loopback(url, "--base-url")
    assert "\n" not in str(err.value).replace(url, "")
