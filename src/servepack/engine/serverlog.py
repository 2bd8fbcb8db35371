"""What a starting server's log says before it answers /health: where it listens, and a fatal error.

llama-server logs `srv  llama_server: listening on ADDRESS` once it serves, and a few lines that mean it never will
(it cannot bind, load or download its model, or parse its arguments). `launch` reads the log's new lines at every
health poll, so a server that listens somewhere else (a preset flag moved it) or logged such a line fails the launch
at once, with that line, instead of after the whole health timeout.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

# `0.04.138.073 I srv  llama_server: listening on http://127.0.0.1:8012` (tools/server/server.cpp, once the model
# loaded; the function is `main` in older builds)
LISTENING = re.compile(r"\bsrv\s+\w+: listening on (\S+)")
# Lines llama-server prints on its way out before it served: each means it will never be healthy.
FATAL = re.compile(
    r"exiting due to|couldn't bind HTTP server socket|failed to download model|error: invalid argument"
    r"|error while handling argument|failed to load model|error loading model|download failed after"
    r"|couldn't start HTTP listener|GGML_ASSERT|terminate called after"
)
READ_CAP = 1 << 20  # bytes read per poll: a server that floods its log is still read in bounded steps
LINE_CAP = 500  # characters of a log line quoted in an error


def _same_address(said: str, host: str, port: int) -> bool:
    """Whether `http://HOST:PORT` as llama-server writes it (an IPv6 host in brackets) is `host`:`port`."""
    try:
        url = urlsplit(said.rstrip("/.,;"))
        return url.scheme == "http" and url.hostname == host.strip("[]").lower() and url.port == port
    except ValueError:
        return False


class LogWatch:
    """Follows one server log from where it stood at launch; `problem()` says why the server will not be healthy
    at `base_url`, quoting the log line, or None while nothing says so."""

    def __init__(self, path: Path, host: str, port: int) -> None:
        self.path, self.host, self.port = path, host, port
        self.base_url = f"http://{host}:{port}"
        try:
            self.offset = path.stat().st_size  # the log is opened for append: earlier launches' lines are not ours
        except OSError:
            self.offset = 0
        self.partial = b""
        self.listening: str | None = None
        self.fatal = False  # the last problem was a fatal line (the server is on its way out), not an address

    def new_lines(self) -> list[str]:
        """The whole lines written since the last call (a line still being written waits for its end)."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read(READ_CAP)
        except OSError:
            return []
        self.offset += len(chunk)
        data = self.partial + chunk
        *lines, self.partial = data.split(b"\n")
        if len(self.partial) > READ_CAP:  # one endless line: judge what there is of it
            lines.append(self.partial)
            self.partial = b""
        return [line.decode("utf-8", "replace").strip() for line in lines]

    def problem(self) -> str | None:
        for line in self.new_lines():
            quoted = line if len(line) <= LINE_CAP else line[:LINE_CAP] + "…"
            if (m := LISTENING.search(line)) is not None:
                self.listening = m.group(1)
                if not _same_address(m.group(1), self.host, self.port):
                    return (f"listens on {m.group(1)}, not on {self.base_url} where servepack started it (a flag "
                            f"moved it; servepack owns host and port); log line: {quoted!r}")
            elif FATAL.search(line):
                self.fatal = True
                return f"logged a fatal error before it was healthy: {quoted!r}"
        return None
