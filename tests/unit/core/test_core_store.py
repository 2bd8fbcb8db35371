from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from servepack.errors import UsageError
from servepack.store import ResultsDir


def test_files_are_written_once(tmp_path: Path) -> None:
    rd = ResultsDir(tmp_path / "r")
    rd.write_json("a.json", {"schema_version": "x/v1", "v": 1})
    with pytest.raises(UsageError, match="append-only"):
        rd.write_json("a.json", {"v": 2})
    assert json.loads((rd.path / "a.json").read_text())["v"] == 1
    assert [p.name for p in rd.files()] == ["a.json"]


def test_jsonl_appends_and_survives_close(tmp_path: Path) -> None:
    rd = ResultsDir(tmp_path / "r")
    with rd.jsonl("requests.jsonl") as w:
        w.write({"i": 1})
        w.write({"i": 2})
    lines = (rd.path / "requests.jsonl").read_text().splitlines()
    assert [json.loads(x)["i"] for x in lines] == [1, 2]
    with pytest.raises(UsageError):
        rd.jsonl("requests.jsonl")


def test_jsonl_batches_keep_order_and_count_with_one_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    import servepack.store as store

    # os.fsync is process-wide: a thread another test left behind (a sampler, a writer) may sync its own file
    # meanwhile, so only this thread's syncs of this writer's file are counted.
    syncs: list[int] = []
    real = store.os.fsync
    me = threading.get_ident()

    def counting_fsync(fd: int) -> None:
        if threading.get_ident() == me:
            syncs.append(fd)
        real(fd)

    monkeypatch.setattr(store.os, "fsync", counting_fsync)
    rd = ResultsDir(tmp_path / "r")
    with rd.jsonl("requests.jsonl") as w:
        del syncs[:]  # opening may sync the directory
        assert w._fh is not None
        fd = w._fh.fileno()
        w.write({"i": 0})
        w.write_many([{"i": i} for i in range(1, 1001)])
        w.write_many([])
        assert w.count == 1001
        # one for the single line, one for the batch of a thousand, none for an empty one
        assert syncs == [fd, fd]
    lines = (rd.path / "requests.jsonl").read_text().splitlines()
    assert [json.loads(x)["i"] for x in lines] == list(range(1001))


def test_new_run_dirs_never_collide(tmp_path: Path) -> None:
    a = ResultsDir.new(tmp_path, "p", "run")
    b = ResultsDir.new(tmp_path, "p", "run")
    assert a.path != b.path and a.path.parent == b.path.parent == tmp_path / "p"


def test_create_takes_a_new_or_empty_folder_and_checks_again_when_it_makes_it(tmp_path: Path) -> None:
    made = ResultsDir.create(tmp_path / "a" / "b")
    assert made.path == tmp_path / "a" / "b" and made.path.is_dir() and list(made.path.iterdir()) == []
    empty = tmp_path / "e"
    empty.mkdir()
    assert ResultsDir.create(empty).path == empty
    (empty / "x.log").write_bytes(b"theirs\n")  # arrived after the command's first check: refused when made
    with pytest.raises(UsageError, match=r"--out .*/e: the folder exists and is not empty \('x.log'\); .*choose a "
                                         r"new folder or remove it$"):
        ResultsDir.create(empty)
    assert [p.name for p in empty.iterdir()] == ["x.log"] and (empty / "x.log").read_bytes() == b"theirs\n"
    assert ResultsDir(empty).path == empty  # the opener (a tune's own folder on --resume) takes it as it is
    (tmp_path / "link").symlink_to(tmp_path / "a" / "b")
    with pytest.raises(UsageError, match=r"a symbolic link \(to .*/a/b\); .*not a link$"):
        ResultsDir.create(tmp_path / "link")


def test_a_pydantic_model_is_written_as_its_own_json_and_a_dict_as_a_dict(tmp_path: Path) -> None:
    """store asks whether a value is a model without importing pydantic (`is_model`); a model is still written by
    its own `model_dump_json` (a datetime in ISO form), a dict by json (the wrong answers: the model written as
    json.dumps(default=str) writes it, `"Row(...)"`, or a dict holding `model_dump_json` taken for a model)."""
    from datetime import datetime

    from servepack.store import dump_json, is_model
    from servepack.strict import Strict

    class Row(Strict):
        at: datetime

    row = Row(at=datetime(2026, 1, 2, 3, 4, 5))
    assert is_model(row) and not is_model({"model_dump_json": 1}) and not is_model(Row)
    assert dump_json(row) == b'{\n  "at": "2026-01-02T03:04:05"\n}\n'
    assert dump_json({"at": row.at}) == b'{\n  "at": "2026-01-02 03:04:05"\n}\n'
    assert dump_json({"model_dump_json": 1}) == b'{\n  "model_dump_json": 1\n}\n'
    rd = ResultsDir(tmp_path / "r")
    with rd.jsonl("rows.jsonl") as w:
        w.write(row)
        w.write_many([row, {"at": "b"}])
    assert (rd.path / "rows.jsonl").read_text() == ('{"at":"2026-01-02T03:04:05"}\n{"at":"2026-01-02T03:04:05"}\n'
                                                    '{"at": "b"}\n')
