"""Issue 31.2: a tune resolves what its trials share once — its preflight's plan locates the engine and hashes the
model, and every trial's session serves those (the counters see a locate or a hash from anywhere)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from core_fixtures import count_resolves
from tune_fixtures import dies_on_launch, write_space

import servepack.engine.llamacpp as llamacpp_mod
from servepack.errors import EngineError, ModelError, UsageError
from servepack.packs import load_pack
from servepack.pipeline.tune import TuneRequest, tune
from servepack.settings import Settings
from servepack.weights.hashcache import HashCache


def test_a_tune_locates_its_engine_and_hashes_its_model_once_for_every_trial(
        tune_pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, server = tune_pack.parent / "tiny.gguf", dies_on_launch(tmp_path)
    seen = count_resolves(monkeypatch, model)
    out = tmp_path / "tune"
    with pytest.raises(EngineError, match="tune measured nothing: 2 trial"):
        tune(TuneRequest(pack_ref=str(tune_pack), space_file=write_space(tmp_path, "[tune]\nthreads = [4, 8]\n"),
                         budget_trials=2, server_bin=server, out=out))
    assert (out / "trials" / "002" / "receipt.json").is_file()  # two trials were planned and opened
    assert seen == {"hash": 1, "locate": 1}
    # the wrong answer, as a trial resolving again would make it: the counters see it
    HashCache.under(Settings.load().cache_dir).sha256(model)
    llamacpp_mod.locate_binary("llama-server", load_pack(str(tune_pack)).pack.engine, server)
    assert seen == {"hash": 2, "locate": 2}


def test_a_tune_preflight_refuses_a_bad_model_file_after_the_engine_and_before_a_trial(
        tune_pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The preflight's plan keeps the order: the engine located once, the --model-file refused, nothing written."""
    bad = tmp_path / "not.gguf"
    bad.write_bytes(b"not a model")
    seen = count_resolves(monkeypatch, bad)
    out = tmp_path / "tune"
    with pytest.raises(ModelError, match=r"^--model-file .*not\.gguf: not a GGUF file"):
        tune(TuneRequest(pack_ref=str(tune_pack), space_file=write_space(tmp_path, "[tune]\nthreads = [4, 8]\n"),
                         budget_trials=2, server_bin=dies_on_launch(tmp_path), model_file=bad, out=out))
    assert seen == {"hash": 0, "locate": 1} and not out.exists()
    with pytest.raises(EngineError):  # a missing binary is refused first, before the model file is looked at
        tune(TuneRequest(pack_ref=str(tune_pack), budget_trials=2, server_bin=tmp_path / "no-such-server",
                         model_file=bad, out=out))
    assert not out.exists()


@pytest.mark.parametrize("server_bin", [False, True], ids=["no-server-bin", "server-bin"])
def test_a_tune_of_an_attach_pack_is_refused_first_as_before(tune_pack: Path, tmp_path: Path,
                                                             server_bin: bool) -> None:
    """The launches check stays the preflight's first refusal, before the survey's engine error (attach refuses a
    --server-bin) is raised; nothing is written."""
    text = tune_pack.read_text()
    attach = '[engine]\nname = "attach"\nrepo = "r"\nbase_url = "http://127.0.0.1:9/v1"\nserved_model = "tiny"\n'
    tune_pack.write_text(text[:text.index("[engine]")] + attach + text[text.index("[hardware]"):])
    out = tmp_path / "tune"
    with pytest.raises(UsageError, match=r"^pack tiny-tune: engine 'attach' attaches to a running server; tune needs "
                                         r"an engine servepack launches \(each trial is a fresh server\)$"):
        tune(TuneRequest(pack_ref=str(tune_pack), space_file=write_space(tmp_path, "[tune]\nthreads = [4, 8]\n"),
                         budget_trials=2, server_bin=dies_on_launch(tmp_path) if server_bin else None, out=out))
    assert not out.exists()


def test_a_tunes_trials_reuse_the_preflights_file_facts(tune_pack: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The GGUF header, the engine's build record and the twin mark are read once, by the preflight's plan: each
    trial's plan (same model file, same binary) takes them from it (`RunOptions.prior`)."""
    import servepack.plan as plan_mod

    reads = {"header": 0, "build": 0, "twin": 0}

    def counted(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            reads[name] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(plan_mod, "read_header", counted("header", plan_mod.read_header))
    monkeypatch.setattr(plan_mod, "read_build_record", counted("build", plan_mod.read_build_record))
    monkeypatch.setattr(plan_mod, "is_twin", counted("twin", plan_mod.is_twin))
    out = tmp_path / "tune"
    with pytest.raises(EngineError, match="tune measured nothing: 3 trial"):
        tune(TuneRequest(pack_ref=str(tune_pack), space_file=write_space(tmp_path, "[tune]\nthreads = [2, 4, 8]\n"),
                         budget_trials=3, server_bin=dies_on_launch(tmp_path), out=out))
    receipts = [out / "trials" / f"{n:03d}" / "receipt.json" for n in (1, 2, 3)]
    assert all(r.is_file() for r in receipts)  # three trials were planned and opened
    assert reads == {"header": 1, "build": 1, "twin": 1}, reads  # each trial reading again: 4 of each
    # what the trials recorded is the preflight's reading, not nothing
    gguf = [json.loads(r.read_text())["model"]["gguf"] for r in receipts]
    assert gguf[0] is not None and gguf.count(gguf[0]) == 3
