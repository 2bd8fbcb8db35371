from __future__ import annotations

from pathlib import Path

import pytest

from servepack.errors import PackError
from servepack.packs import load_pack, load_pack_file, shipped_pack_paths


def test_both_packs_ship_and_validate() -> None:
    assert set(shipped_pack_paths()) == {"qwen2.5-coder-0.5b-cpu", "laguna-s-2.1-dgx-spark"}
    assert load_pack(None).pack.id == "qwen2.5-coder-0.5b-cpu"


def test_laguna_pack_carries_every_pin_and_rule_of_the_seed() -> None:
    p = load_pack("laguna-s-2.1-dgx-spark").pack
    assert p.engine.commit == "04b2b72cb54048ead292884adbe11f284e3ec950"
    assert p.engine.expected_version == "version: 1 (04b2b72)"
    assert "speculative-isfinite" in p.engine.patches
    assert p.model.source.kind == "hf"
    assert p.model.source.revision == "fc4e481289523cf7d0df668da6d1d391616141ca"
    assert p.model.source.mirror_repo == "hizrianraz/Laguna-S-2.1-GGUF"
    assert p.model.sha256 == "a8b55c75714ea73fd90ec85de5defdc0b8d88ca0ad2108343cdd8fc22f7583e4"
    assert {"2k", "8k", "256k", "1m-yarn", "8k-dflash"} == set(p.presets)
    assert p.presets["8k"].flags["n-gpu-layers"] == -1 and p.presets["8k"].ctx_size == 8192
    yarn = p.presets["1m-yarn"]
    assert yarn.role == "chat-only" and yarn.sampling is not None and yarn.sampling.temperature == 0.7
    assert yarn.flags["rope-scaling"] == "yarn" and yarn.ctx_size == 1048576
    assert p.claims.temperature == 0.0
    assert (p.claims.headline.metric, p.claims.headline.preset, p.claims.headline.gen_tokens) == (
        "decode_tok_s", "8k", 128)
    dflash = next(c for c in p.candidates if c.name == "dflash")
    assert dflash.decision == "DO_NOT_PROMOTE" and p.presets[dflash.preset].requires == ["dflash-draft"]
    assert p.hardware.id == "dgx-spark-gb10-128gb" and p.pull.min_free_gb == 200


def _write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "mine.toml"
    f.write_text(text)
    return f


def _shipped_text() -> str:
    return shipped_pack_paths()["qwen2.5-coder-0.5b-cpu"].read_text()


@pytest.mark.parametrize(
    ("edit", "expect"),
    [
        (lambda t: t.replace('id = "qwen2.5-coder-0.5b-cpu"', 'id = "Bad Id"'), "field id: String should match"),
        (lambda t: t.replace("[model]\n", "[model]\ncolour = 'red'\n"), "field model.colour: Extra inputs"),
        (lambda t: t.replace('default_preset = "default"', 'default_preset = "nope"'),
         "default_preset names preset 'nope'"),
        (lambda t: t.replace("ctx-size = 4096\nn-gpu-layers = 0\nparallel = 1",
                             "ctx-size = 4096\nport = 9\nparallel = 1", 1), "flag 'port' is set by servepack"),
        (lambda t: t.replace('kind = "pypi"', 'kind = "ftp"'), "field model.source"),
    ],
)
def test_bad_pack_is_one_line_naming_file_and_field(tmp_path: Path, edit, expect: str) -> None:  # type: ignore[no-untyped-def]
    f = _write(tmp_path, edit(_shipped_text()))
    with pytest.raises(PackError) as info:
        load_pack_file(f)
    msg = str(info.value)
    assert msg.startswith(f"{f}: ")
    assert expect in msg
    assert "\n" not in msg


def test_invalid_toml_and_unknown_ref(tmp_path: Path) -> None:
    f = _write(tmp_path, "id = [")
    with pytest.raises(PackError, match="not valid TOML"):
        load_pack_file(f)
    with pytest.raises(PackError, match="servepack packs"):
        load_pack("no-such-pack")


def test_sha256_of_pack_bytes_is_recorded(tmp_path: Path) -> None:
    f = _write(tmp_path, _shipped_text())
    loaded = load_pack_file(f)
    import hashlib

    assert loaded.sha256 == hashlib.sha256(f.read_bytes()).hexdigest()
    assert loaded.shipped is False
