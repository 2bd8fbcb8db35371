"""Shape twins: a real GGUF header followed by random tensor bytes — for speed only, never quality.

A twin is marked by a sidecar `<file>.twin.json` written beside it; every receipt reads that mark.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import random
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import httpx
from pydantic import Field

from servepack.errors import ModelError, UsageError
from servepack.safepath import Replacing, create_new, open_regular, replace_bytes
from servepack.strict import Strict
from servepack.weights.gguf import MODEL_HINT, alignment_of, parse_header, read_header

TWIN_SUFFIX = ".twin.json"


def twin_marker(path: Path) -> Path:
    return path.with_name(path.name + TWIN_SUFFIX)


def is_twin(path: Path) -> bool:
    """True when `path` carries the shape-twin mark."""
    marker = twin_marker(path)
    if not marker.is_file():
        return False
    try:
        return bool(json.loads(marker.read_text()).get("random_weights", True))
    except (OSError, ValueError):
        return True  # an unreadable mark still marks: never let a twin pass for real weights


TWIN_SCHEMA_VERSION = "servepack.twin/v1"
TWIN_NOTE = "speed only, never smoke or quality"
CHUNK = 8 << 20
HEADER_FETCH_START = 1 << 20
HEADER_FETCH_MAX = 1 << 30
# Clearing bit 6 of every odd byte clears the top exponent bit of every little-endian f16/bf16 half-word
# and of every f32 word, so float tensors and the f16 scales of quant blocks (all at even offsets) hold
# finite values below 2 in magnitude: no Inf/NaN from loading, while the bytes stay random.
_BOUND = bytes(b & 0xBF for b in range(256))


class TwinMark(Strict):
    """The sidecar that marks a file as a random-weight shape twin."""

    schema_version: str = TWIN_SCHEMA_VERSION
    random_weights: bool = True
    source_sha256_header: str = Field(description="sha256 of the source's first data_offset bytes")
    source: str
    note: str = TWIN_NOTE
    seed: int | None
    size_bytes: int
    data_offset: int
    tensor_bytes: int
    architecture: str | None
    created_at: str


@dataclass(frozen=True)
class TwinResult:
    """A written twin: the file, its mark and the sizes it has."""

    path: Path
    marker: Path
    size_bytes: int
    data_offset: int
    tensor_bytes: int
    source_sha256_header: str
    seconds: float


def _random_chunks(total: int, seed: int | None) -> Iterator[bytes]:
    rng = random.Random(seed) if seed is not None else None
    left = total
    while left > 0:
        n = min(CHUNK, left)
        buf = bytearray(rng.randbytes(n) if rng is not None else os.urandom(n))
        buf[1::2] = buf[1::2].translate(_BOUND)
        yield bytes(buf)
        left -= n


def _write_failed(out: Path, exc: OSError, need: int) -> ModelError:
    return ModelError(f"cannot write {out} ({exc.strerror}); it needs {need / 1e9:,.2f} GB: free some space or "
                      "choose an output path on another disk")


def _write_new(path: Path, chunks: Iterator[bytes]) -> None:
    """Write a new file (never an existing one, never through a link), synced to disk; removed if that fails."""
    fd = create_new(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise


def make_twin(source: Path, out: Path, *, seed: int | None = None, source_label: str | None = None) -> TwinResult:
    """Write `out`: the header of `source` (a GGUF or only its header) then random tensor bytes; mark it."""
    started = time.monotonic()
    header = read_header(source)
    marker = twin_marker(out)
    if os.path.lexists(out) or os.path.lexists(marker):
        raise UsageError(f"{out} already exists; choose another output path (twins are never overwritten)")
    if not header.tensors:
        raise ModelError(f"{source}: GGUF header lists no tensors; nothing to twin")
    with open_regular(source, MODEL_HINT, error=ModelError) as fh:
        head = fh.read(header.data_offset)
    # A header-only source may stop before the alignment padding; the padding is zeros in a real file.
    head += b"\0" * (header.data_offset - len(head))
    head_sha = hashlib.sha256(head).hexdigest()
    # Writers pad each tensor, the last one too, to the alignment; so does the twin.
    align = alignment_of(header.metadata, str(source))
    random_len = header.tensor_bytes + (-header.tensor_bytes % align)
    total = header.data_offset + random_len
    mark = TwinMark(
        source_sha256_header=head_sha, source=source_label or str(source.resolve()), seed=seed,
        size_bytes=total, data_offset=header.data_offset, tensor_bytes=header.tensor_bytes,
        architecture=header.architecture,
        created_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    marked = False
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(out.parent).free
        if free < total:
            raise ModelError(f"only {free / 1e9:,.2f} GB free at {out.parent}; the twin of {source.name} needs "
                             f"{total / 1e9:,.2f} GB: free some space or choose an output path on another disk")
        with Replacing(out, sync=True) as fh:
            for chunk in itertools.chain([head], _random_chunks(random_len, seed)):
                fh.write(chunk)
            # The mark goes first: a twin must never exist, even for a moment, without it.
            _write_new(marker, iter([(mark.model_dump_json(indent=2) + "\n").encode()]))
            marked = True
    except OSError as exc:
        if marked:
            with contextlib.suppress(OSError):
                marker.unlink()
        raise _write_failed(out, exc, total) from None
    return TwinResult(out, marker, total, header.data_offset, header.tensor_bytes, head_sha,
                      time.monotonic() - started)


def fetch_header(url: str, out: Path, *, headers: dict[str, str] | None = None, timeout_s: float = 60.0) -> int:
    """Fetch only a GGUF's header bytes by HTTP Range, doubling the range until it parses; returns its size."""
    want = HEADER_FETCH_START
    with httpx.Client(follow_redirects=True, timeout=timeout_s, headers=headers or {}) as client:
        while True:
            data = _get_prefix(client, url, want)
            try:
                header = parse_header(io.BytesIO(data), url)
            except ModelError as exc:
                if "truncated" not in str(exc) or len(data) < want or want >= HEADER_FETCH_MAX:
                    raise
                want *= 2
                continue
            head = data[: header.data_offset]
            try:
                out.parent.mkdir(parents=True, exist_ok=True)
                replace_bytes(out, head, sync=True)
            except OSError as exc:
                raise _write_failed(out, exc, len(head)) from None
            return len(head)


def _get_prefix(client: httpx.Client, url: str, want: int) -> bytes:
    """The first `want` bytes of `url`; streamed, so a server that ignores Range costs no more than that."""
    buf = bytearray()
    try:
        with client.stream("GET", url, headers={"Range": f"bytes=0-{want - 1}", "Accept-Encoding": "identity"}) as r:
            if r.status_code not in (200, 206):
                raise ModelError(f"GET {url} (Range 0-{want - 1}) answered HTTP {r.status_code}")
            for chunk in r.iter_bytes():
                buf += chunk
                if len(buf) >= want:
                    break
    except httpx.HTTPError as exc:
        raise ModelError(f"cannot fetch the GGUF header from {url}: {exc}") from None
    return bytes(buf[:want])
