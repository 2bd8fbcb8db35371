"""Issue 31.2: a reproduce run hashes its model once and locates its engine once — the facts it checks against the
record are the ones its session serves (the counters see a hash or a locate from anywhere)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from core_fixtures import count_resolves
from reproduce_fixtures import FakeRecord

import servepack.engine.llamacpp as llamacpp_mod
from servepack.packs import load_pack
from servepack.pipeline.reproduce import ReproduceRequest, reproduce
from servepack.records.verify import read_receipt
from servepack.settings import Settings
from servepack.weights.hashcache import HashCache


@pytest.mark.parametrize("model_file", [False, True], ids=["pack-model", "model-file"])
def test_a_reproduce_run_hashes_its_model_once_and_locates_its_engine_once(
        fake_record: FakeRecord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_file: bool) -> None:
    model = fake_record.root / "tiny.gguf"
    if model_file:
        model = shutil.copy(model, tmp_path / "copy.gguf")
    seen = count_resolves(monkeypatch, model)
    o = reproduce(ReproduceRequest(record=str(fake_record.recipe), pack_ref=str(fake_record.pack),
                                   server_bin=fake_record.server_bin, model_file=model if model_file else None,
                                   samples=2, out=tmp_path / "run", export=tmp_path / "export"))
    assert [c.state for c in o.checks] == ["same", "same", "same"], [c.line() for c in o.checks]
    receipt = read_receipt(tmp_path / "run")
    assert receipt.model is not None and receipt.model.path == str(model)  # the model served is the one hashed
    assert o.argv[o.argv.index("--model") + 1] == str(model)
    assert seen == {"hash": 1, "locate": 1}
    # the wrong answer, as a session resolving again would make it: the counters see it
    HashCache.under(Settings.load().cache_dir).sha256(model)
    llamacpp_mod.locate_binary("llama-server", load_pack(str(fake_record.pack)).pack.engine, fake_record.server_bin)
    assert seen == {"hash": 2, "locate": 2}
