"""`plan.plan_run`: a run resolved before its launch — it launches and writes nothing, it is frozen, it refuses in
the order a run refuses, and the facts read from disk beside the model and the engine are read once per run.

The engine here is the shared fake server behind a script that notes every start (its `--version` probe too), so
"nothing launched" is what the script saw, not what the code says."""

from __future__ import annotations

import dataclasses
import json
import stat
import sys
from pathlib import Path

import pytest
from core_fixtures import make_pack

import servepack.weights.gguf as gguf_mod
from servepack.engine.buildrecord import BUILD_RECORD
from servepack.errors import ClaimRefused, EngineError, ModelError, UsageError
from servepack.plan import RunOptions, RunPlan, plan_run
from servepack.records.receipt import RECEIPT_NAME
from servepack.session import open_session
from servepack.weights.twin import TWIN_SUFFIX, is_twin


def _marking_server(directory: Path, marker: Path) -> Path:
    exe = directory / "bin" / "llama-server"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\necho \"$*\" >> {marker}\n"
                   f"exec {sys.executable} -m servepack.testing.fake_server \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def _starts(marker: Path) -> list[str]:
    return marker.read_text().splitlines() if marker.exists() else []


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def marker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("marks") / "started"  # beside nothing the plan could touch


@pytest.fixture
def server(tmp_path: Path, marker: Path) -> Path:
    return _marking_server(tmp_path, marker)


def _twin(tiny_pack: Path) -> None:
    (tiny_pack.parent / f"tiny.gguf{TWIN_SUFFIX}").write_text(json.dumps({"random_weights": True}))


def test_a_plan_launches_nothing_and_writes_nothing(tiny_pack: Path, tmp_path: Path, server: Path,
                                                    marker: Path, _isolated_results: Path) -> None:
    out = tmp_path / "run"
    pack_dir_before = _tree(tiny_pack.parent)
    plan = plan_run(str(tiny_pack), None, RunOptions(out=out, server_bin=server))
    assert _starts(marker) == ["--version"]  # located (its version asked), never started to serve
    assert not out.exists() and _tree(_isolated_results) == []  # no results folder, here or under the root
    assert _tree(tiny_pack.parent) == pack_dir_before  # nothing beside the pack or the model either
    assert plan.preset_name == "p" and plan.model is not None and plan.facts is not None
    assert plan.facts.path == server and plan.base_url == f"http://127.0.0.1:{plan.port}"
    assert plan.preconditions == () and plan.random_weights is False and plan.gguf is not None
    # the wrong answer the checks above would see: opening the plan starts the server and writes the run
    with open_session(plan) as s:
        assert s.plan is plan and s.model == plan.model
    assert len(_starts(marker)) == 2 and f"--port {plan.port}" in _starts(marker)[1]
    assert (out / RECEIPT_NAME).is_file()


def test_a_plan_and_its_options_are_frozen(tiny_pack: Path, server: Path) -> None:
    options = RunOptions(server_bin=server)
    plan = plan_run(str(tiny_pack), None, options)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.port = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.claim = True  # type: ignore[misc]
    # a changed plan is a new plan; the one resolved stays as it was
    other = dataclasses.replace(plan, port=plan.port + 1)
    assert other.port == plan.port + 1 != plan.port and isinstance(other, RunPlan)


def test_an_existing_out_is_refused_before_anything_is_resolved(tiny_pack: Path, tmp_path: Path, server: Path,
                                                                marker: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    said: list[str] = []
    with pytest.raises(UsageError, match=r"--out .*taken"):
        plan_run(str(tiny_pack), "nope", RunOptions(out=out, server_bin=server, progress=said.append))
    assert said == [] and _starts(marker) == []  # not even the preset (unknown too) was looked at
    # the wrong answer: a new --out with the same unknown preset gets to the preset
    with pytest.raises(UsageError, match=r"--preset: "):
        plan_run(str(tiny_pack), "nope", RunOptions(out=tmp_path / "new", server_bin=server))
    assert _starts(marker) == []


def test_a_refused_flag_is_refused_before_anything_starts(tiny_pack: Path, server: Path, marker: Path) -> None:
    tiny_pack.write_text(tiny_pack.read_text().replace("jinja = true\n", 'jinja = true\ntools = "all"\n', 1))
    said: list[str] = []
    with pytest.raises(UsageError, match=r"--allow-server-flag tools"):
        plan_run(str(tiny_pack), None, RunOptions(server_bin=server, progress=said.append, allow_flags=()))
    assert said == [] and _starts(marker) == []
    # allowed, the same preset is planned (the wrong answer: a refusal whatever the opt-in)
    plan = plan_run(str(tiny_pack), None, RunOptions(server_bin=server, allow_flags={"tools"}))
    assert plan.allowed == frozenset({"tools"}) and _starts(marker) == ["--version"]
    # surveyed (`--dry-run`), the refusal is said in the plan, not raised
    surveyed = plan_run(str(tiny_pack), None, RunOptions(server_bin=server, allow_flags=(), survey=True))
    assert len(surveyed.notes) == 1 and surveyed.notes[0].startswith("a run refuses to launch this: ")
    assert "tools" in surveyed.notes[0]


def test_a_claim_is_refused_for_a_non_claim_preset_then_hardware_before_the_model(
        tiny_pack: Path, tmp_path: Path, server: Path, marker: Path) -> None:
    text = tiny_pack.read_text()
    tiny_pack.write_text(text.replace("[presets.p.flags]", '[presets.p]\nrole = "experiment"\n[presets.p.flags]', 1))
    with pytest.raises(ClaimRefused, match=r"--claim: preset 'p' has role 'experiment'; claims need a claim preset"):
        plan_run(str(tiny_pack), None, RunOptions(server_bin=server, claim=True))
    assert _starts(marker) == []
    (tmp_path / "gpu").mkdir()
    gpu = make_pack(tmp_path / "gpu", hardware="spark")
    said: list[str] = []
    with pytest.raises(ClaimRefused, match=r"^claim refused: hardware: detected .*not dgx-spark-gb10-128gb"):
        plan_run(str(gpu), None, RunOptions(server_bin=server, claim=True, progress=said.append))
    assert not any(s.startswith("model ") for s in said) and _starts(marker) == []  # before the model was hashed
    # the wrong answer: without --claim the same pack is planned, its hardware a claim condition that fails
    plan = plan_run(str(gpu), None, RunOptions(server_bin=server))
    assert plan.preconditions[0].startswith("hardware: detected ") and len(plan.preconditions) == 1


def test_a_claim_condition_known_before_the_launch_is_refused_by_the_plan(tiny_pack: Path, server: Path,
                                                                          marker: Path) -> None:
    assert plan_run(str(tiny_pack), None, RunOptions(server_bin=server, claim=True)).preconditions == ()
    _twin(tiny_pack)
    with pytest.raises(ClaimRefused, match=r"^claim refused: model is a random-weight shape twin: speed only$"):
        plan_run(str(tiny_pack), None, RunOptions(server_bin=server, claim=True))
    assert _starts(marker) == ["--version", "--version"]  # located both times, launched neither
    plan = plan_run(str(tiny_pack), None, RunOptions(server_bin=server))
    assert plan.random_weights is True and plan.preconditions == ("model is a random-weight shape twin: speed only",)


def test_a_survey_keeps_what_it_cannot_resolve(tiny_pack: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-such" / "llama-server"
    with pytest.raises(EngineError):
        plan_run(str(tiny_pack), None, RunOptions(server_bin=missing))
    plan = plan_run(str(tiny_pack), None, RunOptions(server_bin=missing, survey=True))
    assert plan.facts is None and isinstance(plan.engine_error, EngineError) and plan.model is not None
    (tiny_pack.parent / "tiny.gguf").unlink()
    plan = plan_run(str(tiny_pack), None, RunOptions(server_bin=missing, survey=True))
    assert plan.model is None and plan.model_error is not None and "tiny.gguf" in str(plan.model_error)


def test_the_twin_mark_build_record_and_gguf_header_are_read_once_per_run(
        tiny_pack: Path, tmp_path: Path, server: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plan, claim policy, session and receipt share one read of each; the counters see a read from anywhere."""
    _twin(tiny_pack)
    (server.parent / BUILD_RECORD).write_text("{}")  # unreadable as a record: read, and None
    reads = {"twin": 0, "build": 0, "gguf": 0}
    real_read_text, real_parse = Path.read_text, gguf_mod.parse_header

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if self.name.endswith(TWIN_SUFFIX):
            reads["twin"] += 1
        elif self.name == BUILD_RECORD:
            reads["build"] += 1
        return real_read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    def parse_header(fh: object, source: str = "<stream>") -> object:
        if source.endswith("tiny.gguf"):
            reads["gguf"] += 1
        return real_parse(fh, source)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)
    monkeypatch.setattr(gguf_mod, "parse_header", parse_header)
    plan = plan_run(str(tiny_pack), None, RunOptions(out=tmp_path / "run", server_bin=server))
    located = reads["build"]  # locating the engine reads its build record for the pin, before the plan's own read
    with open_session(plan) as s:
        assert s.random_weights is True
    receipt = json.loads(real_read_text(tmp_path / "run" / RECEIPT_NAME))
    assert receipt["model"]["random_weights"] is True and receipt["model"]["gguf"]["architecture"] == "llama"
    assert "claim" in receipt and "model is a random-weight shape twin: speed only" in receipt["claim"]["reasons"]
    assert reads == {"twin": 1, "build": located + 1, "gguf": 1}
    # the wrong answer, as a second reader would make it: the counters see it
    assert is_twin(tiny_pack.parent / "tiny.gguf") and gguf_mod.read_header(tiny_pack.parent / "tiny.gguf")
    assert reads["twin"] == 2 and reads["gguf"] == 2


def test_the_dry_run_shows_the_argv_of_the_plan_an_rpc_split_included(tiny_pack: Path, server: Path,
                                                                       marker: Path) -> None:
    """`run --dry-run` is the run's own plan: a preset with a [topology] shows the head's --rpc and split."""
    from servepack.pipeline.dryrun import plan_launch

    plain = plan_launch(str(tiny_pack), server_bin=server)
    assert "--rpc" not in plain.argv and plain.argv[0] == str(server)
    tiny_pack.write_text(tiny_pack.read_text() + '[topology]\npresets = ["p"]\ntensor_split = [1, 1]\n'
                         '[[topology.workers]]\nport = 0\nstart = true\nthreads = 1\n'
                         '[[topology.workers]]\nhost = "127.0.0.1"\nport = 50052\n')
    split = plan_launch(str(tiny_pack), server_bin=server)
    rpc = split.argv[split.argv.index("--rpc") + 1].split(",")
    assert rpc[1] == "127.0.0.1:50052" and rpc[0].startswith("127.0.0.1:") and rpc[0] != "127.0.0.1:0"
    assert split.argv[split.argv.index("--tensor-split") + 1] == "1,1"
    # the head's own part is the plain argv (its port aside); the wrong answer, the dry run before the plan, stopped
    # there: the argv without the split that a run executes
    head = split.argv[:split.argv.index("--rpc")]
    assert head[:-1] == plain.argv[:-1] and head != split.argv
    assert all(line == "--version" for line in _starts(marker))  # nothing started to serve, no worker either


def test_a_model_and_engine_already_resolved_are_taken_as_they_are(tiny_pack: Path, tmp_path: Path, server: Path,
                                                                   marker: Path) -> None:
    """`RunOptions.model`/`.facts` (a tune's preflight, reproduce's facts): not hashed, not located again — the
    version probe is the locate's — while a --model-file is still checked as a model file and a claim hashes again."""
    first = plan_run(str(tiny_pack), None, RunOptions(server_bin=server))
    assert first.model is not None and first.facts is not None and _starts(marker) == ["--version"]
    (tiny_pack.parent / "tiny.gguf").unlink()  # resolving the pack's model again would fail now
    again = plan_run(str(tiny_pack), None, RunOptions(server_bin=server, model=first.model, facts=first.facts))
    assert again.model == first.model and again.facts == first.facts and _starts(marker) == ["--version"]
    # the wrong answer, a plan that resolves for itself: it fails on the missing file and probes the binary again
    assert plan_run(str(tiny_pack), None, RunOptions(server_bin=server, survey=True)).model_error is not None
    assert _starts(marker) == ["--version", "--version"]
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"nope")
    with pytest.raises(ModelError, match="not a GGUF file"):
        plan_run(str(tiny_pack), None, RunOptions(server_bin=server, model_path=bad, model=first.model,
                                                  facts=first.facts))
    with pytest.raises(ModelError, match=r"tiny\.gguf"):  # a claim resolves (and hashes) its model itself
        plan_run(str(tiny_pack), None, RunOptions(server_bin=server, claim=True, model=first.model,
                                                  facts=first.facts))
