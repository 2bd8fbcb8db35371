"""The search space: TOML tables, ranges, hostile input, constraints between flags and their repair."""

from __future__ import annotations

from pathlib import Path

import pytest

from servepack.errors import UsageError
from servepack.tune.space import build_space, constraint_problem, default_space, load_space, merged_flags


def _space(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "space.toml"
    p.write_text(text)
    return p


def test_a_space_file_with_lists_ranges_and_short_names(tmp_path: Path) -> None:
    space = load_space(_space(tmp_path, '[tune]\nt = [2, 4]\nbatch-size = { min = 256, max = 2048, step = "x2" }\n'
                                        'ubatch-size = { min = 128, max = 384, step = 128 }\nfa = ["on", "off"]\n'))
    assert space.params == {"threads": (2, 4), "batch-size": (256, 512, 1024, 2048),
                            "ubatch-size": (128, 256, 384), "flash-attn": ("on", "off")}
    assert space.size() == 2 * 4 * 3 * 2


@pytest.mark.parametrize(("text", "words"), [
    ("[tune]\n", "at least one flag"),
    ("threads = [1]\n", "exactly one [tune] table"),
    ("[tune]\nthreads = [1]\n[other]\nx = 1\n", "exactly one [tune] table"),
    ("[tune]\nport = [8080]\n", "set by servepack itself"),
    ("[tune]\nmodel = ['x']\n", "set by servepack itself"),
    ("[tune]\nthreads = [-5]\n", "must be ≥ -1"),
    ("[tune]\nbatch-size = [0]\n", "must be ≥ 1"),
    ("[tune]\nthreads = [2, 2]\n", "listed twice"),
    ("[tune]\nthreads = []\n", "no candidate values"),
    ("[tune]\nthreads = { min = 1, max = 100000 }\n", "more than 64"),
    ("[tune]\nthreads = { min = 8, max = 1 }\n", "min ≤ max"),
    ("[tune]\nthreads = { min = 1, max = 8, step = 0 }\n", "positive integer"),
    ("[tune]\nthreads = { min = 1, max = 8, by = 2 }\n", "a range is"),
    ("[tune]\nt = [1]\nthreads = [2]\n", "given twice"),
    ("[tune]\nThreads = [1]\n", "without dashes"),
    ("[tune]\nthreads = [[1]]\n", "not a string, number or boolean"),
    ("[tune]\nthreads = [1\n", "not valid TOML"),
    ("[tune]\n" + "".join(f"f{i} = [1, 2, 3, 4]\n" for i in range(9)), "narrow it"),
])
def test_a_bad_space_is_one_clear_error(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(UsageError) as err:
        load_space(_space(tmp_path, text))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_missing_or_binary_space_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        load_space(tmp_path / "absent.toml")
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe[tune]")
    with pytest.raises(UsageError, match=r"not UTF-8 text \(byte 0\); a space is a UTF-8 TOML file"):
        load_space(tmp_path / "bin.toml")
    with pytest.raises(UsageError, match="not a regular file"):
        load_space(tmp_path)
    with pytest.raises(UsageError, match="not a regular file"):
        load_space(Path("/dev/zero"))


def test_ubatch_above_batch_is_never_in_the_grid() -> None:
    space = build_space({"batch-size": [256, 1024], "ubatch-size": [128, 512]}, "t")
    grid = space.grid({"ctx-size": 512})
    assert {"batch-size": 256, "ubatch-size": 512} not in grid
    assert {"batch-size": 1024, "ubatch-size": 512} in grid and len(grid) == 3


def test_constraints_read_the_base_preset_and_llama_defaults() -> None:
    space = build_space({"ubatch-size": [512, 4096]}, "t")
    # no batch-size anywhere: llama-server's default of 2048 applies
    assert space.grid({}) == [{"ubatch-size": 512}]
    # the base preset's short name counts
    assert space.grid({"b": 8192}) == [{"ubatch-size": 512}, {"ubatch-size": 4096}]
    assert constraint_problem({"cache-type-v": "q8_0", "flash-attn": "off"}) == "cache-type-v q8_0 needs flash-attn on"
    assert constraint_problem({"cache-type-v": "q8_0", "fa": "on"}) is None


def test_repair_lowers_ubatch_and_turns_flash_attention_on() -> None:
    space = build_space({"batch-size": [256, 2048], "ubatch-size": [128, 256, 1024], "cache-type-v": ["f16", "q8_0"],
                         "flash-attn": ["off", "on"]}, "t")
    fixed = space.repair({"batch-size": 256, "ubatch-size": 1024, "cache-type-v": "q8_0", "flash-attn": "off"}, {})
    assert fixed == {"batch-size": 256, "ubatch-size": 256, "cache-type-v": "q8_0", "flash-attn": "on"}
    ok = {"batch-size": 2048, "ubatch-size": 1024, "cache-type-v": "f16", "flash-attn": "off"}
    assert space.repair(dict(ok), {}) == ok
    small = build_space({"batch-size": [64], "ubatch-size": [128]}, "t")
    assert small.repair({"batch-size": 64, "ubatch-size": 128}, {}) is None


def test_merged_flags_replace_the_base_short_name() -> None:
    merged = merged_flags({"t": 4, "ctx-size": 512, "fa": "off"}, {"threads": 8, "flash-attn": "on"})
    assert merged == {"ctx-size": 512, "threads": 8, "flash-attn": "on"}


def test_default_space_follows_the_host() -> None:
    cpu = default_space(8, 0)
    assert cpu.params["threads"] == (4, 8, 12) and "n-gpu-layers" not in cpu.params
    assert default_space(2, 1).params["threads"] == (1, 2) and "n-gpu-layers" in default_space(2, 1).params
