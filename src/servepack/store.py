"""Append-only results directories: every file written atomically (temp + rename), never overwritten."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel

from servepack.errors import UsageError


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def rfc3339(ts: datetime) -> str:
    """UTC timestamp as RFC 3339 with a Z and millisecond precision."""
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """Write `data` to `path` via a temp file and rename; refuse to replace an existing file."""
    if path.exists():
        raise UsageError(f"{path} exists; results are append-only, choose a new --out directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        # link() fails if the target appeared meanwhile, so nothing is ever replaced.
        os.link(tmp, path)
    finally:
        os.unlink(tmp)
    return path


def dump_json(obj: BaseModel | dict[str, Any] | list[Any]) -> bytes:
    if isinstance(obj, BaseModel):
        return (obj.model_dump_json(indent=2) + "\n").encode()
    return (json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n").encode()


class JsonlWriter:
    """An append-only JSON-lines file, flushed per line so a crash keeps what was written."""

    def __init__(self, path: Path) -> None:
        if path.exists():
            raise UsageError(f"{path} exists; results are append-only, choose a new --out directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fh: IO[str] | None = path.open("x", encoding="utf-8")
        self.count = 0

    def write(self, record: BaseModel | dict[str, Any]) -> None:
        assert self._fh is not None, "writer closed"
        line = record.model_dump_json() if isinstance(record, BaseModel) else json.dumps(record, default=str)
        self._fh.write(line + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.count += 1

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ResultsDir:
    """One run's results directory. Files are created once; names are relative to `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    @classmethod
    def new(cls, root: Path, pack_id: str, label: str | None = None) -> ResultsDir:
        """results/<pack>/<UTC timestamp>[-label]/, made unique if two runs start in the same second."""
        stamp = utc_now().strftime("%Y%m%dT%H%M%SZ")
        base = root / pack_id / (f"{stamp}-{label}" if label else stamp)
        candidate, n = base, 1
        while True:
            try:
                candidate.mkdir(parents=True, exist_ok=False)
                return cls(candidate)
            except FileExistsError:
                n += 1
                candidate = base.with_name(f"{base.name}.{n}")

    def file(self, name: str) -> Path:
        return self.path / name

    def write_json(self, name: str, obj: BaseModel | dict[str, Any] | list[Any]) -> Path:
        return write_bytes_atomic(self.file(name), dump_json(obj))

    def write_text(self, name: str, text: str) -> Path:
        return write_bytes_atomic(self.file(name), text.encode())

    def jsonl(self, name: str) -> JsonlWriter:
        return JsonlWriter(self.file(name))

    def files(self) -> Iterator[Path]:
        """Every regular file under the directory, sorted, skipping in-flight temp files."""
        for p in sorted(self.path.rglob("*")):
            if p.is_file() and not p.name.startswith("."):
                yield p
