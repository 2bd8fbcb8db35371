"""A record's tokenized launch → local preset flags: what passes, what the engine seam rewrites, what is dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servepack.engine.server import preset_args
from servepack.errors import UsageError
from servepack.reproduce.translate import translate

FIXTURE = Path(__file__).parents[2] / "fixtures" / "registry" / "laguna_dgx_spark_record.json"


def seed_arguments() -> list[str]:
    doc = json.loads(FIXTURE.read_text())
    args: list[str] = doc["data"]["metadata"]["localmaxxing"]["tokenized"]["arguments"]
    return args


def by_action(t: object, action: str) -> list[str]:
    return [r.flag for r in t.rewrites if r.action == action]  # type: ignore[attr-defined]


def test_the_seed_command_passes_its_flags_and_rewrites_model_host_port() -> None:
    t = translate("llama.cpp", seed_arguments(), source="seed")
    assert t.binary == "llama-server"
    assert t.flags == {
        "alias": "poolside/Laguna-S-2.1-GGUF", "ctx-size": 9280, "parallel": 1, "batch-size": 2048,
        "ubatch-size": 1024, "n-gpu-layers": "auto", "fit": "on", "fit-target": 24576, "flash-attn": "on",
        "cache-type-k": "q4_0", "cache-type-v": "q4_0", "cache-ram": 0, "cache-reuse": 0, "context-checkpoints": 0,
        "metrics": True,
    }
    assert by_action(t, "rewritten") == ["llama-server", "--model", "--host", "--port"]
    # this llama.cpp calls it --ctx-checkpoints: passed as recorded, and said so
    assert by_action(t, "passed-unknown") == ["--context-checkpoints"]
    assert by_action(t, "dropped") == [] and t.blockers == []
    args = preset_args(t.preset("seed").flags)
    assert args[:4] == ["--alias", "poolside/Laguna-S-2.1-GGUF", "--ctx-size", "9280"]
    assert "--model" not in args and "--host" not in args and "--port" not in args and args[-1] == "--metrics"


def test_short_names_become_long_ones_and_a_bare_flag_takes_no_value() -> None:
    t = translate("llama.cpp", ["/app/llama-server", "-m", "x.gguf", "-c", "4096", "-ngl", "-1", "-fa", "-np", "2",
                                "--batch-size=512", "--host", "0.0.0.0"], source="s")
    assert t.flags == {"ctx-size": 4096, "n-gpu-layers": -1, "flash-attn": True, "parallel": 2, "batch-size": 512}
    assert set(by_action(t, "normalized")) == {"-c", "-ngl", "-fa", "-np"}
    assert by_action(t, "rewritten") == ["/app/llama-server", "-m", "--host"]
    assert preset_args(t.preset("s").flags)[:4] == ["--ctx-size", "4096", "--n-gpu-layers", "-1"]


def test_host_paths_and_secrets_are_dropped_and_listed_without_blocking() -> None:
    t = translate("llama.cpp", ["llama-server", "--log-file", "/var/log/ls.log", "--slot-save-path", "/srv/slots",
                                "-mm", "/models/proj.gguf", "--api-key", "s3cret-key", "-hf", "org/repo:Q4_K_M",
                                "--ctx-size", "2048"], source="s")
    assert t.flags == {"ctx-size": 2048}
    assert by_action(t, "dropped") == ["--log-file", "--slot-save-path", "-mm", "--api-key", "-hf"]
    assert t.blockers == []
    lines = " ".join(r.line() for r in t.rewrites)
    assert "s3cret-key" not in lines and "--api-key <redacted> " in lines
    assert "/srv/slots" in lines  # the listing names what was dropped


def test_a_short_key_in_either_spelling_is_listed_redacted() -> None:
    t = translate("llama.cpp", ["llama-server", "--api-key", "Zq~", "--api-key=Yw~", "--ctx-size", "2048"], source="s")
    lines = " ".join(r.line() for r in t.rewrites)
    assert t.flags == {"ctx-size": 2048} and lines.count("<redacted>") == 2
    assert "Zq~" not in lines and "Yw~" not in lines and "Zq~" not in str(t.rewrites) and "Yw~" not in str(t.rewrites)


def test_drops_that_change_what_is_measured_block_a_reproduction() -> None:
    t = translate("llama.cpp", ["llama-server", "--lora", "/a/adapter.gguf", "-md", "/a/draft.gguf",
                                "--rpc", "10.0.0.2:50052", "--ctx-size", "2048"], source="s")
    assert t.flags == {"ctx-size": 2048}
    assert len(t.blockers) == 3
    assert "--lora /a/adapter.gguf" in t.blockers[0] and "LoRA" in t.blockers[0]
    assert "-md /a/draft.gguf" in t.blockers[1] and "draft" in t.blockers[1]
    assert "--rpc 10.0.0.2:50052" in t.blockers[2] and "loopback" in t.blockers[2]


def test_a_bare_argument_an_odd_name_and_a_second_tensor_override_block() -> None:
    t = translate("llama.cpp", ["llama-server", "model.gguf", "--Weird", "1", "-ot", "a=CPU", "-ot", "b=CUDA0",
                                "-c", "1024", "--ctx-size", "2048"], source="s")
    assert t.flags == {"override-tensor": "a=CPU", "ctx-size": 2048}  # the last ctx-size, as llama-server keeps
    assert [b.split(",")[0] for b in t.blockers] == ["the record's launch used model.gguf",
                                                    "the record's launch used --Weird 1",
                                                    "the record's launch used -ot b=CUDA0"]


def test_a_value_llama_server_refuses_is_a_usage_error_naming_the_record() -> None:
    t = translate("llama.cpp", ["llama-server", "--parallel", "0"], source="rec.json: metadata.x.tokenized.arguments")
    with pytest.raises(UsageError, match=r"rec\.json: metadata\.x\.tokenized\.arguments: flag 'parallel' = 0"):
        t.preset("d")


def test_an_engine_without_a_translation_and_an_empty_launch_are_refused() -> None:
    with pytest.raises(UsageError, match="engine 'vllm' has no launch translation"):
        translate("vllm", ["vllm", "serve", "m"], source="s")
    with pytest.raises(UsageError, match="tokenized launch is empty"):
        translate("llama.cpp", [], source="s")


def test_localized_names_the_local_binary_and_model_file() -> None:
    t = translate("llama.cpp", seed_arguments(), source="s").localized(binary="/opt/llama-server",
                                                                       model="/m/laguna.gguf")
    local = {r.flag: r.local for r in t.rewrites}
    assert local["llama-server"] == "/opt/llama-server" and local["--model"] == "/m/laguna.gguf"
    assert local["--port"] == "a free loopback port chosen at launch"


def test_each_tool_reads_its_flags_by_its_own_table() -> None:
    """-r is llama-bench's repetitions, llama-server's and llama-cli's reverse prompt; -p and -n differ too."""
    bench = translate("llama.cpp", ["llama-bench", "-m", "w.gguf", "-p", "512,2048", "-n", "128", "-r", "5",
                                    "-ngl", "99", "-fa", "1", "-mmp", "0", "-ctk", "q8_0"], source="s")
    assert bench.tool == "llama-bench"
    assert "reverse-prompt" not in bench.flags  # the wrong answer: -r 5 read as llama-server's reverse prompt
    assert bench.flags == {"n-gpu-layers": 99, "flash-attn": "on", "no-mmap": True, "cache-type-k": "q8_0"}
    assert bench.bench == {"n-prompt": (512, 2048), "n-gen": (128,), "repetitions": (5,)}
    assert [r.line() for r in bench.rewrites if r.action == "protocol"] == [
        "protocol: -p 512,2048 (llama-bench n-prompt: prompt tokens of each prompt-processing test (the context "
        "marks))",
        "protocol: -n 128 (llama-bench n-gen: tokens generated by each generation test (the output length))",
        "protocol: -r 5 (llama-bench repetitions: repetitions of each test (the samples per cell), not "
        "llama-server's reverse prompt)"]
    assert bench.blockers == []
    server = translate("llama.cpp", ["llama-server", "-r", "User:", "-n", "64", "-c", "4096"], source="s")
    assert server.tool == "llama-server" and server.bench == {}
    assert server.flags == {"reverse-prompt": "User:", "n-predict": 64, "ctx-size": 4096}
    cli = translate("llama.cpp", ["llama-cli", "-m", "x.gguf", "-p", "hello there", "-r", "User:", "-n", "64",
                                  "-c", "4096", "-cnv"], source="s")
    assert cli.tool == "llama-cli" and cli.flags == {"ctx-size": 4096} and cli.bench == {"n-gen": (64,)}
    assert [r.flag for r in cli.rewrites if r.action == "dropped"] == ["-p", "-r", "-cnv"]


def test_a_llama_bench_sweep_of_server_settings_cannot_be_one_server() -> None:
    t = translate("llama.cpp", ["llama-bench", "-m", "w.gguf", "-ngl", "99,0", "-b", "512"], source="s")
    assert t.flags == {"batch-size": 512}
    assert t.blockers == ["the record's launch used -ngl 99,0, dropped here: llama-bench ran one test per value of "
                          "n-gpu-layers; one server serves one: give the record's value you want in PACK"]


def test_llama_bench_flags_still_meet_the_flag_policy() -> None:
    t = translate("llama.cpp", ["llama-bench", "-m", "w.gguf", "--rpc", "10.0.0.2:50052"], source="s")
    assert "rpc" not in t.flags and t.blockers  # compute elsewhere: dropped, and the comparison says so


def test_llama_bench_model_download_and_load_flags_read_by_llama_benchs_own_help() -> None:
    """llama-bench's -hf (the weights' HF repo:quant, as llama-server's -hf), -lm (load mode), -lzm, --repack 0 and
    --offline are its own flags (`llama-bench --help`); the registry's LocalMaxxing records run e.g.
    `llama-bench -hf ORG/X-GGUF:IQ2_XXS -ngl 999 -ncmoe 36 -fa off -lm none -r 5 -p 512 -n 128`."""
    t = translate("llama.cpp", ["llama-bench", "-hf", "wrenlabs/Wren-7B-GGUF:Q4_K_M", "-ngl", "999", "-lm", "none",
                                "-lzm", "off", "--repack", "0", "--offline", "-r", "3", "-n", "64"], source="s")
    # the wrong answer: -hf and -lm "not a llama-bench flag servepack knows", dropped, and the reproduction
    # NOT_COMPARABLE ("launch differs") although neither changes what the server computes
    assert t.blockers == []
    assert not [r for r in t.rewrites if "not a llama-bench flag servepack knows" in r.reason]
    assert t.flags == {"n-gpu-layers": 999, "load-mode": "none", "lazy-mode": "off", "no-repack": True,
                       "offline": True}
    assert [r.line() for r in t.rewrites if r.flag == "-hf"] == [
        "dropped: -hf wrenlabs/Wren-7B-GGUF:Q4_K_M (where the recorded host got its weights; the local model file "
        "replaces it)"]
    assert t.bench == {"repetitions": (3,), "n-gen": (64,)}
    token = translate("llama.cpp", ["llama-bench", "-m", "w.gguf", "-hft", "hf_secret"], source="s")
    assert "hf_secret" not in " ".join(r.line() for r in token.rewrites) and token.blockers == []
