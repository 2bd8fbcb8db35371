"""One loopback check for every URL servepack is told to talk to: parse, resolve, check every address."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from servepack.errors import UsageError


def _addresses(host: str, port: int | None) -> list[str]:
    try:
        ip = ipaddress.ip_address(host)
        return [str(ip)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port or 80, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return sorted({str(info[4][0]) for info in infos})


def loopback_problem(url: str) -> str | None:
    """Why `url` is not an http(s) URL of a server on this machine's loopback, or None when it is.

    The host is resolved and every address it resolves to must be loopback (127.0.0.0/8 or ::1): a name that
    resolves nowhere, or anywhere else as well, is refused. User info (`http://127.0.0.1@10.0.0.1/`) is refused
    outright, since clients disagree about which part is the host. So is a space or a control character anywhere:
    urlsplit drops a tab or newline silently, the HTTP client refuses the rest (InvalidURL, exit 70, before).
    """
    bad = next((i for i, ch in enumerate(url) if ch.isspace() or not ch.isprintable()), None)
    if bad is not None:
        return f"a space or control character ({ascii(url[bad])[1:-1]}) at position {bad}; give the URL alone"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "scheme must be http or https"
    if "@" in parts.netloc:
        return "user info in the URL (…@host) is not allowed"
    host = parts.hostname
    if not host:
        return "no host in the URL"
    addrs = _addresses(host, port)
    if not addrs:
        return f"host {host!r} does not resolve"
    far = [a for a in addrs if not ipaddress.ip_address(a.split("%")[0]).is_loopback]
    if far:
        return f"host {host!r} resolves to {', '.join(far)}, not loopback"
    return None


def is_loopback_url(url: str) -> bool:
    return loopback_problem(url) is None


def require_loopback(url: str, what: str = "--base-url") -> str:
    """`url` without a trailing slash, or UsageError naming why it is refused."""
    problem = loopback_problem(url)
    if problem is not None:
        raise UsageError(f"{what} {url}: servepack talks to servers on this machine only (loopback): {problem}")
    return url.rstrip("/")
