"""Results directories (issue 11, items 8, 11, 13): sealed once they hold a receipt, --out under a file is one
line, a directory must be writable with headroom before a run, and a failed write is a ResultsWriteError."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from servepack.errors import ResultsWriteError, UsageError
from servepack.store import ResultsDir, check_writable, sealed_run, write_bytes_atomic


def _sealed(tmp_path: Path) -> Path:
    run = ResultsDir(tmp_path / "run")
    run.write_json("server_bench.json", {"schema_version": "x/v1"})
    run.write_json("receipt.json", {"run_id": "r"})
    return run.path


def test_out_under_a_file_is_a_usage_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(UsageError, match=r"notes.txt is a file, not a directory; choose another --out"):
        ResultsDir(tmp_path / "notes.txt" / "run")
    with pytest.raises(UsageError, match=r"notes.txt is a file, not a directory"):
        ResultsDir(tmp_path / "notes.txt")
    with pytest.raises(UsageError, match=r"a file, not a directory; set SERVEPACK_RESULTS_DIR"):
        ResultsDir.new(tmp_path / "notes.txt", "pack", "bench")


def test_out_in_a_new_nested_directory_is_made(tmp_path: Path) -> None:
    rd = ResultsDir(tmp_path / "a" / "b" / "run")
    assert rd.path.is_dir() and list(rd.path.iterdir()) == []  # the writability probe leaves nothing behind


def test_nothing_is_written_inside_a_finished_run(tmp_path: Path) -> None:
    run = _sealed(tmp_path)
    with pytest.raises(UsageError, match=r"lies inside the finished results directory .*run \(it has a receipt\)"):
        ResultsDir(run / "x")
    with pytest.raises(UsageError, match=r"is the finished results directory"):
        ResultsDir(run)
    with pytest.raises(UsageError, match=r"results directories are sealed"):
        write_bytes_atomic(run / "sub" / "recipe.json", b"{}")
    with pytest.raises(UsageError, match=r"results directories are sealed"):
        ResultsDir.new(run, "pack")
    assert sorted(p.name for p in run.iterdir()) == ["receipt.json", "server_bench.json"]


def test_a_link_into_a_finished_run_is_followed_and_refused(tmp_path: Path) -> None:
    run = _sealed(tmp_path)
    (tmp_path / "alias").symlink_to(run)
    assert sealed_run(tmp_path / "alias" / "x") == run.resolve()
    with pytest.raises(UsageError, match="sealed"):
        ResultsDir(tmp_path / "alias" / "x")


def test_a_run_still_writable_until_its_receipt(tmp_path: Path) -> None:
    rd = ResultsDir(tmp_path / "run")
    rd.write_json("a.json", {"v": 1})
    rd.write_json("receipt.json", {"v": 2})  # the receipt itself is the seal, and is written last
    assert sealed_run(rd.path) == rd.path.resolve() and sealed_run(tmp_path) is None


def test_headroom_is_checked_before_a_run(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"MiB free; a run needs at least 1048576 MiB"):
        check_writable(tmp_path, 1 << 40)
    check_writable(tmp_path, 1 << 20)
    with pytest.raises(UsageError, match=r"MiB free"):
        ResultsDir(tmp_path / "big", min_free_bytes=1 << 50)


def test_a_full_disk_mid_write_is_a_results_write_error_and_close_is_quiet(tmp_path: Path) -> None:
    rd = ResultsDir(tmp_path / "run")
    w = rd.jsonl("requests.jsonl")
    w.write({"i": 1})
    real = w._fh
    assert real is not None
    real.close()
    w._fh = open("/dev/full", "w", encoding="utf-8")  # every flush fails with ENOSPC
    with pytest.raises(ResultsWriteError, match=r"cannot write requests.jsonl in .*\(the disk is full\); measuring "
                                                r"stopped") as info:
        w.write({"i": 2})
    assert info.value.exit_code == 1 and isinstance(info.value, OSError)
    with pytest.raises(ResultsWriteError):
        w.write({"i": 3})  # a writer that failed stays failed
    w.close()  # the unflushed line is dropped, not raised a second time
    assert [json.loads(x) for x in (rd.path / "requests.jsonl").read_text().splitlines()] == [{"i": 1}]


class _HalfWrites:
    """A file on a disk that fills mid-write: the first `room` bytes of a write reach the file, then ENOSPC."""

    def __init__(self, path: Path, room: int) -> None:
        self.f = open(path, "ab", buffering=0)  # closed by the writer under test
        self.room = room

    def write(self, text: str) -> int:
        self.f.write(text.encode()[:self.room])
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        return self.f.fileno()

    def close(self) -> None:
        self.f.close()


@pytest.mark.parametrize("many", [False, True])
def test_a_write_cut_short_by_a_full_disk_leaves_no_torn_record(tmp_path: Path, many: bool) -> None:
    # Part of the line (or of the batch) reached the disk before it filled up: the file is cut back to its last
    # whole record, so every line of it still parses (left as it was, it ended in '{"i": 2, "pad"').
    rd = ResultsDir(tmp_path / "run")
    w = rd.jsonl("requests.jsonl")
    w.write_many([{"i": 0}, {"i": 1}])
    real = w._fh
    assert real is not None
    real.close()
    w._fh = _HalfWrites(rd.path / "requests.jsonl", room=14)  # type: ignore[assignment]
    with pytest.raises(ResultsWriteError, match=r"the disk is full"):
        if many:
            w.write_many([{"i": 2, "pad": "x" * 40}, {"i": 3}])
        else:
            w.write({"i": 2, "pad": "x" * 40})
    w.close()
    text = (rd.path / "requests.jsonl").read_text()
    assert text.endswith("\n") and [json.loads(x) for x in text.splitlines()] == [{"i": 0}, {"i": 1}]
    with pytest.raises(ResultsWriteError):
        w.write({"i": 4})  # still failed: nothing appended after the cut


def test_write_failure_names_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rd = ResultsDir(tmp_path / "run")

    def ro(*_: object, **__: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("servepack.store.os.fsync", ro)
    with pytest.raises(ResultsWriteError, match=r"cannot write server_bench.json .*the filesystem is read-only"):
        rd.write_json("server_bench.json", {"v": 1})
    assert not (rd.path / "server_bench.json").exists()
    assert [p.name for p in rd.path.iterdir()] == []  # the temp file is gone too


def test_out_under_a_fifo_names_it_as_a_fifo(tmp_path: Path) -> None:
    """Issue 35 leftover: a FIFO where a folder must be was called 'a file'; now what it is. The wrong answer must
    fail: 'is a file, not a directory' for a FIFO."""
    import os

    from servepack.store import check_out

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for out in (fifo, fifo / "run"):
        with pytest.raises(UsageError) as exc:
            check_out(out, "the export directory")
        assert str(exc.value) == (f"cannot create the export directory {out}: {fifo} is a FIFO (named pipe), not a "
                                  "directory; choose another --out")
        assert "is a file" not in str(exc.value)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(UsageError, match=r"dangling is a broken link, not a directory"):
        check_out(tmp_path / "dangling" / "run")
