"""The vLLM engine's argv from presets, checked against vLLM's documented flags; bad presets refused at validation."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

from vllm_fixtures import COMMIT, DOCUMENTED, vllm_pack

from servepack.cli.main import cli
from servepack.engine.base import LaunchRequest
from servepack.engine.catalog import get_engine
from servepack.engine.vllm import VllmEngine, reported_version
from servepack.errors import EngineError, PackError
from servepack.packs import load_pack_file
from servepack.packs.schema import EnginePin, Preset
from servepack.testing.vllm_standin import parser
from servepack.weights.resolve import ModelRef, resolve_model_ref

PIN = EnginePin(name="vllm", repo="r", package="vllm", package_version="0.8.5")


def argv_for(preset: dict[str, object], ref: ModelRef | None = None) -> list[str]:
    req = LaunchRequest(facts=None, pin=PIN, model_path=None, preset=Preset.model_validate(preset), host="127.0.0.1",
                        port=8123, log_dir=Path("."), health_timeout_s=5,
                        model_ref=ref or ModelRef("org/tiny", COMMIT, "hf-repo"))
    return VllmEngine().argv(req)


def flag_values(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, tok in enumerate(argv):
        if tok.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[tok] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def test_one_gpu_preset_argv_uses_documented_flags_only() -> None:
    argv = argv_for({"flags": {}, "vllm": {"max_model_len": 4096, "gpu_memory_utilization": 0.85, "dtype": "bfloat16",
                                          "quantization": "fp8", "served_model_name": "tiny-chat"}})
    assert argv[:3] == ["vllm", "serve", "org/tiny"]
    assert set(flag_values(argv)) <= DOCUMENTED
    assert flag_values(argv) == {
        "--revision": COMMIT, "--host": "127.0.0.1", "--port": "8123", "--served-model-name": "tiny-chat",
        "--tensor-parallel-size": "1", "--pipeline-parallel-size": "1", "--max-model-len": "4096",
        "--gpu-memory-utilization": "0.85", "--dtype": "bfloat16", "--quantization": "fp8",
    }
    parsed, extra = parser().parse_known_args(argv[2:])  # the stand-in parses vLLM's flag types
    assert extra == [] and parsed.gpu_memory_utilization == 0.85 and parsed.served_model_name == ["tiny-chat"]


@pytest.mark.parametrize(("vllm", "expected"), [
    ({"tensor_parallel_size": 4}, {"--tensor-parallel-size": "4", "--pipeline-parallel-size": "1"}),
    ({"tensor_parallel_size": 2, "pipeline_parallel_size": 2},
     {"--tensor-parallel-size": "2", "--pipeline-parallel-size": "2"}),
    ({"pipeline_parallel_size": 2, "distributed_executor_backend": "mp"},
     {"--pipeline-parallel-size": "2", "--distributed-executor-backend": "mp"}),
    ({"nodes": 2, "tensor_parallel_size": 8, "pipeline_parallel_size": 2},
     {"--tensor-parallel-size": "8", "--pipeline-parallel-size": "2", "--distributed-executor-backend": "ray"}),
])
def test_parallel_presets_map_to_vllms_parallel_flags(vllm: dict[str, object], expected: dict[str, str]) -> None:
    argv = argv_for({"flags": {}, "vllm": vllm})
    flags = flag_values(argv)
    assert set(flags) <= DOCUMENTED
    assert {k: flags.get(k) for k in expected} == expected
    if "--distributed-executor-backend" not in expected:
        assert "--distributed-executor-backend" not in flags
    parsed, extra = parser().parse_known_args(argv[2:])
    assert extra == [] and parsed.tensor_parallel_size == int(flags["--tensor-parallel-size"] or 0)
    assert parsed.pipeline_parallel_size == int(flags["--pipeline-parallel-size"] or 0)


def test_pass_through_flags_follow_the_documented_ones_and_the_default_name_is_the_model() -> None:
    argv = argv_for({"flags": {"enable-prefix-caching": True, "max-num-seqs": 64, "enforce-eager": False}},
                    ModelRef("/models/tiny", None, "dir"))
    assert argv[2] == "/models/tiny" and "--revision" not in argv
    assert flag_values(argv)["--served-model-name"] == "/models/tiny"
    assert argv[-3:] == ["--enable-prefix-caching", "--max-num-seqs", "64"] and "--enforce-eager" not in argv
    _, extra = parser().parse_known_args(argv[2:])
    assert extra == ["--enable-prefix-caching", "--max-num-seqs", "64"]


def test_argv_without_a_model_reference_is_an_engine_error() -> None:
    req = LaunchRequest(facts=None, pin=PIN, model_path=Path("m.gguf"), preset=Preset(flags={}), host="127.0.0.1",
                        port=1, log_dir=Path("."), health_timeout_s=5)
    with pytest.raises(EngineError, match=r'model\.source kind "hf-repo" or "dir"'):
        VllmEngine().argv(req)


def test_the_catalog_knows_vllm_and_the_version_is_read_from_its_output() -> None:
    assert get_engine("vllm").name == "vllm"
    assert reported_version("0.8.5\n") == "0.8.5"
    assert reported_version("INFO vllm version 0.10.1.dev3+gabc") == "0.10.1.dev3+gabc"
    assert reported_version("no digits here") is None


def test_the_example_vllm_pack_validates() -> None:
    example = Path(__file__).parents[3] / "examples" / "packs" / "vllm-qwen2.5-0.5b-instruct.toml"
    pack = load_pack_file(example).pack
    assert pack.engine.name == "vllm" and pack.model.source.kind == "hf-repo"
    tp2 = pack.presets["tp2"].vllm
    assert tp2 is not None and tp2.tensor_parallel_size == 2
    ray = pack.presets["two-nodes"].vllm
    assert ray is not None and ray.executor == "ray"


@pytest.mark.parametrize(("kwargs", "field", "why"), [
    ({"vllm": "tensor_parallel_size = 0"}, "presets.p.vllm.tensor_parallel_size", "greater than or equal to 1"),
    ({"vllm": "pipeline_parallel_size = -1"}, "presets.p.vllm.pipeline_parallel_size", "greater than or equal to 1"),
    ({"vllm": "gpu_memory_utilization = 1.5"}, "presets.p.vllm.gpu_memory_utilization", "less than or equal to 1"),
    ({"vllm": "gpu_memory_utilization = 0"}, "presets.p.vllm.gpu_memory_utilization", "greater than 0"),
    ({"vllm": 'dtype = "fp12"'}, "presets.p.vllm.dtype", "'bfloat16'"),
    ({"vllm": "max_model_len = 0"}, "presets.p.vllm.max_model_len", "greater than or equal to 1"),
    ({"vllm": 'quantization = "--evil"'}, "presets.p.vllm.quantization", "should match pattern"),
    ({"vllm": "tensor_parallel = 2"}, "presets.p.vllm.tensor_parallel", "Extra inputs are not permitted"),
    ({"vllm": 'nodes = 2\ndistributed_executor_backend = "mp"'}, "presets.p.vllm",
     "2 nodes need 'ray'"),
    ({"flags": "tensor-parallel-size = 2"}, "pack", "presets.p.flags.tensor-parallel-size: set by servepack"),
    ({"flags": 'served-model-name = "x"'}, "pack", "presets.p.flags.served-model-name: set by servepack"),
    ({"source": 'kind = "file"\npath = "x.gguf"', "model": 'file = "x.gguf"'}, "pack",
     "engine vllm loads a Hugging Face repository"),
    ({"source": 'kind = "file"\npath = "x.gguf"'}, "model", "model.file: name the GGUF file"),
    ({"engine": 'name = "llama.cpp"\nrepo = "r"\ncommit = "abc1234"'}, "pack",
     "model.source kind 'hf-repo' is for engine 'vllm'"),
    ({"source": 'kind = "hf-repo"\nrepo = "../x"'}, "model.source.hf-repo.repo", "cannot be '.' or '..'"),
])
def test_bad_vllm_values_are_one_line_naming_the_field(tmp_path: Path, kwargs: dict[str, str], field: str,
                                                       why: str) -> None:
    path = vllm_pack(tmp_path, **kwargs)
    with pytest.raises(PackError) as err:
        load_pack_file(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: ")
    assert f"field {field}:" in msg if field != "pack" else f"{path}: pack: " in msg
    assert why in msg


def test_pack_validate_refuses_a_bad_vllm_preset_with_exit_2(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["pack", "validate", str(vllm_pack(tmp_path, vllm="gpu_memory_utilization = 1.5"))])
    assert r.exit_code == 2 and "presets.p.vllm.gpu_memory_utilization" in r.output
    ok = CliRunner().invoke(cli, ["pack", "validate", str(vllm_pack(tmp_path, name="ok.toml"))])
    assert ok.exit_code == 0, ok.output


def test_a_vllm_table_on_a_llama_cpp_preset_is_refused(tmp_path: Path) -> None:
    path = vllm_pack(tmp_path, source='kind = "file"\npath = "x.gguf"', model='file = "x.gguf"',
                     engine='name = "llama.cpp"\nrepo = "r"\ncommit = "abc1234"')
    with pytest.raises(PackError, match=r"presets\.p\.vllm is for engine 'vllm'"):
        load_pack_file(path)


def test_a_file_or_sha256_on_an_engine_loaded_model_is_refused(tmp_path: Path) -> None:
    path = vllm_pack(tmp_path, model='file = "model.gguf"')
    with pytest.raises(PackError, match=r"loaded by the engine itself: drop model\.file and model\.sha256"):
        load_pack_file(path)


def test_a_dir_model_must_exist_and_is_passed_by_absolute_path(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    pack = load_pack_file(vllm_pack(tmp_path, source='kind = "dir"\npath = "weights"')).pack
    ref = resolve_model_ref(pack.model, pack_dir=tmp_path)
    assert ref == ModelRef(str((tmp_path / "weights").resolve()), None, "dir")
    from servepack.errors import ModelError

    missing = load_pack_file(vllm_pack(tmp_path, source='kind = "dir"\npath = "nowhere"', name="m.toml")).pack
    with pytest.raises(ModelError, match="is not a directory"):
        resolve_model_ref(missing.model, pack_dir=tmp_path)
