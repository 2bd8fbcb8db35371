"""Every numeric field of a pack has a range: walked from the pydantic model, then tried with extreme values (a
field of the shipped pack set to each), each refused by validation or inside its range; tune ranges are counted
before they are expanded (max = 2**63 was a MemoryError)."""

from __future__ import annotations

import copy
import math
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel, ValidationError

from servepack.cli.main import cli
from servepack.errors import UsageError
from servepack.packs import shipped_pack_paths
from servepack.packs.loader import DEFAULT_PACK_ID
from servepack.packs.schema import INT_FLAG_MAX, NUMBER_FLAG_MAX, Pack
from servepack.tune.space import MAX_VALUES, build_space

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXTREMES: list[Any] = [2**63, -(2**63), 1e30, -1, 0, math.nan, math.inf, -math.inf, 10**400]
# Numbers whose range a validator checks rather than a Field: a preset's flags (packs.schema._flag_names) and the
# pack's tune space (tune.space.build_space, which `pack validate` and `tune` call), the hardware's RAM range
# (HardwareMatch._range: 0 ≤ low ≤ high ≤ 1 PiB). All are tried below.
CHECKED_BY_VALIDATORS = ("pack.presets[].flags[]", "pack.tune[]", "pack.tune[][]", "pack.hardware.match.memory_gb[]")


def _bounds(meta: list[Any]) -> tuple[Any, Any]:
    low = high = None
    for m in meta:
        for item in getattr(m, "metadata", [m]):
            low = next((getattr(item, k) for k in ("ge", "gt") if getattr(item, k, None) is not None), low)
            high = next((getattr(item, k) for k in ("le", "lt") if getattr(item, k, None) is not None), high)
    return low, high


def _numeric_fields(tp: Any, meta: list[Any], path: str, seen: set[type]) -> list[tuple[str, Any, Any]]:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        first, *more = typing.get_args(tp)
        return _numeric_fields(first, [*meta, *more], path, seen)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if tp in seen:
            return []
        seen.add(tp)
        return [x for name, f in tp.model_fields.items()
                for x in _numeric_fields(f.annotation, list(f.metadata), f"{path}.{name}", seen)]
    if origin in (typing.Union, types.UnionType):
        return [x for arg in typing.get_args(tp) for x in _numeric_fields(arg, meta, path, seen)]
    if origin in (list, tuple, dict):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis][1 if origin is dict else 0:]
        return [x for a in args for x in _numeric_fields(a, [], f"{path}[]", seen)]
    if tp in (int, float):
        return [(path, *_bounds(meta))]
    return []


FIELDS = _numeric_fields(Pack, [], "pack", set())


def _shipped() -> dict[str, Any]:
    return tomllib.loads(shipped_pack_paths()[DEFAULT_PACK_ID].read_text())


def _leaves(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Where the shipped pack holds a number (not a bool)."""
    if isinstance(doc, dict):
        return [x for k, v in doc.items() for x in _leaves(v, (*path, k))]
    if isinstance(doc, list):
        return [x for i, v in enumerate(doc) for x in _leaves(v, (*path, i))]
    return [path] if isinstance(doc, int | float) and not isinstance(doc, bool) else []


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node: Any = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def test_the_walk_sees_the_numeric_fields_of_every_part_of_a_pack() -> None:
    paths = {p for p, _, _ in FIELDS}
    assert {"pack.model.size_bytes", "pack.bench.context_marks[]", "pack.bench.concurrency[]",
            "pack.presets[].vllm.max_model_len", "pack.topology.workers[].port", "pack.hardware.match.memory_gb[]",
            "pack.claims.headline.context_tokens", "pack.presets[].flags[]", "pack.tune[]"} <= paths
    assert len(FIELDS) >= 35


@pytest.mark.parametrize(("path", "low", "high"), FIELDS, ids=[f[0] for f in FIELDS])
def test_every_numeric_field_has_a_finite_range(path: str, low: Any, high: Any) -> None:
    if path in CHECKED_BY_VALIDATORS:
        return
    assert low is not None and high is not None, f"{path}: open range ({low}, {high})"
    assert math.isfinite(high) and high <= 2**53


LEAVES = _leaves(_shipped())


@pytest.mark.parametrize("value", EXTREMES, ids=repr)
@pytest.mark.parametrize("where", LEAVES, ids=lambda p: ".".join(map(str, p)))
def test_an_extreme_number_in_a_shipped_pack_is_refused_or_in_range(where: tuple[Any, ...], value: Any) -> None:
    doc = _set(_shipped(), where, value)
    try:
        pack = Pack.model_validate(doc)
    except ValidationError as exc:
        assert exc.error_count() >= 1
        return
    kept = pack.model_dump()
    node: Any = kept
    for key in where:
        node = node[key]
    assert node == value and math.isfinite(node) and abs(node) <= NUMBER_FLAG_MAX, (where, value)


@pytest.mark.parametrize(("flag", "value", "words"), [
    ("ctx-size", 2**63, f"must be at most {INT_FLAG_MAX:,}"), ("threads", 2**31, f"must be at most {INT_FLAG_MAX:,}"),
    ("ctx-size", 10**400, "must be at most"), ("rope-freq-base", 1e30, "out of range"),
    ("rope-freq-base", math.inf, "finite"), ("rope-freq-base", math.nan, "finite"), ("seed", -(2**60), "out of range"),
])
def test_a_preset_flag_with_a_huge_number_is_refused(flag: str, value: Any, words: str) -> None:
    doc = _shipped()
    preset = doc["default_preset"]
    doc["presets"][preset]["flags"][flag] = value
    with pytest.raises(ValidationError, match=words):
        Pack.model_validate(doc)
    doc["presets"][preset]["flags"][flag] = 4096  # the same flag with an ordinary value validates
    assert Pack.model_validate(doc).presets[preset].flags[flag] == 4096


def test_the_ram_range_of_a_hardware_target_is_bounded() -> None:
    doc = _shipped()
    for bad in ([0, 2**63], [0, math.inf], [math.nan, 1], [-1, 1], [2, 1]):
        doc["hardware"]["match"]["memory_gb"] = bad
        with pytest.raises(ValidationError, match="memory_gb"):
            Pack.model_validate(doc)
    doc["hardware"]["match"]["memory_gb"] = [0, 1 << 20]
    assert Pack.model_validate(doc).hardware.match.memory_gb == (0, 1 << 20)


def test_a_tune_range_is_counted_before_it_is_expanded() -> None:
    with pytest.raises(UsageError, match=r"ctx-size: the range 1\.\.9223372036854775808 step 1 holds "
                                         r"9,223,372,036,854,775,808 values, more than 64"):
        build_space({"ctx-size": {"min": 1, "max": 2**63}}, "test")
    with pytest.raises(UsageError, match="more than 64"):
        build_space({"ctx-size": {"min": 0, "max": 64 * 2**20, "step": 2**20}}, "test")  # 65 values: one too many
    exact = build_space({"ctx-size": {"min": 0, "max": 63 * 2**20, "step": 2**20}}, "test").params["ctx-size"]
    assert len(exact) == MAX_VALUES and exact[-1] == 63 * 2**20
    with pytest.raises(UsageError, match="ubatch-size' = 2147483648: must be at most 2,147,483,647"):
        build_space({"ubatch-size": {"min": 1, "max": 2**63, "step": "x2"}}, "test")  # stops at 65 values
    doubling = build_space({"ubatch-size": {"min": 1, "max": 4096, "step": "x2"}}, "test")
    assert doubling.params["ubatch-size"] == tuple(2**i for i in range(13))


def test_pack_validate_and_tune_refuse_a_huge_range_in_one_line(tmp_path: Path) -> None:
    text = shipped_pack_paths()[DEFAULT_PACK_ID].read_text()
    pack = tmp_path / "huge.toml"
    huge = "\n[tune]\nctx-size = { min = 1, max = 9223372036854775807 }\n"
    pack.write_text(text.replace('id = "', 'id = "huge-', 1) + huge)
    space = tmp_path / "space.toml"
    space.write_text("[tune]\nbatch-size = { min = 1, max = 9223372036854775807 }\n")
    for args in (["pack", "validate", str(pack)],
                 ["tune", DEFAULT_PACK_ID, "--space", str(space), "--out", str(tmp_path / "never")]):
        result = CliRunner().invoke(cli, args)
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and "values, more than 64" in lines[0], result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["huge.toml", "space.toml"]
