"""The pure parts of the local registry: KV-cache sizing, model matching, pins, figures, verdicts, classification."""

from __future__ import annotations

from pathlib import Path

import pytest

from servepack.registry.choose import (
    Candidate,
    HostFacts,
    RunCheck,
    check_hardware,
    check_model,
    figure_for,
    kv_cache_bytes,
    model_pins,
    recipe_context,
)
from servepack.registry.db import RegistryDB, SweepRow, content_sha256
from servepack.registry.format import load_record
from servepack.registry.ingest import _kind_of
from servepack.weights.gguf import GgufHeader

SEED = Path("/work/shared/seeds/004_af61b7e57142d640.txt")
FIXTURE = Path(__file__).parents[2] / "fixtures" / "registry" / "laguna_dgx_spark_record.json"


def _header(**arch: object) -> GgufHeader:
    return GgufHeader(3, {"general.architecture": "llama", **{f"llama.{k}": v for k, v in arch.items()}}, [], 0)


def test_kv_cache_bytes_from_the_header_shapes() -> None:
    h = _header(block_count=2, **{"attention.head_count": 4, "attention.head_count_kv": 2}, embedding_length=64)
    # 2 layers × 100 tokens × 2 KV heads × (16 + 16 dims) × 2 bytes (f16)
    assert kv_cache_bytes(h, 100) == 2 * 100 * 2 * 32 * 2 == 25_600
    # q4_0 blocks: 18 bytes per 32 elements
    assert kv_cache_bytes(h, 100, "q4_0", "q4_0") == int(2 * 100 * 2 * 32 * 18 / 32)
    assert kv_cache_bytes(h, 100, "q4_0", "q4_0") != kv_cache_bytes(h, 100)
    # Explicit key/value lengths win over embedding ÷ heads; per-layer KV head counts are summed.
    h2 = _header(block_count=2, **{"attention.head_count": 4, "attention.head_count_kv": [1, 3],
                                   "attention.key_length": 8, "attention.value_length": 24}, embedding_length=64)
    assert kv_cache_bytes(h2, 10) == 10 * (1 + 3) * (8 * 2 + 24 * 2)
    # Without the shapes, or with an unknown cache type, there is no estimate rather than a wrong one.
    assert kv_cache_bytes(_header(embedding_length=64), 100) is None
    assert kv_cache_bytes(h, 100, "q3_weird") is None
    h3 = _header(block_count=3, **{"attention.head_count": 4, "attention.head_count_kv": [1, 3]}, embedding_length=64)
    assert kv_cache_bytes(h3, 10) is None  # per-layer list of the wrong length


def test_model_matches_ids_exactly_then_aliases_never_a_part(tmp_path: Path) -> None:
    seed = load_record(SEED)
    with RegistryDB.open(tmp_path / "r.sqlite3", create=True) as db:
        db.store(SEED.read_bytes(), seed, str(SEED))
        assert db.model_match("Laguna-S-2.1") == ({"laguna-s-2-1"}, set(), "model id")  # the API's model id
        assert db.model_match("poolside-laguna-s-2-1-gguf--q4-k-m")[1:] == ({"poolside-laguna-s-2-1-gguf--q4-k-m"},
                                                                          "model instance id")
        _models, instances, how = db.model_match("poolside/Laguna-S-2.1-GGUF")  # the repository: an alias
        assert how == "alias" and instances == {"poolside-laguna-s-2-1-gguf--q4-k-m"}
        for wrong in ("Laguna-S-2.2", "", "qwen", "laguna", "laguna-s-2", "q4-k-m"):  # parts of names never match
            assert db.model_match(wrong)[:2] == (set(), set()), wrong
            assert db.recipes(model=wrong) == []
        assert [r.id for r in db.recipes(model="laguna-s-2.1")] == [seed.id]


def test_seed_pins_context_and_notes_figure() -> None:
    seed = load_record(SEED)
    pins = model_pins(seed)
    assert pins.sha256 == ("7da520c5f44bc3c79d4eeebfd1151ba7114c5d7568e72a995638417093c5753f",)
    assert pins.file_names == ("laguna-s-2.1-Q4_K_M.gguf",)
    assert recipe_context(seed) == 9280
    fig = figure_for(seed, [], 8192)
    assert fig is not None and (fig.decode_tok_s, fig.context_tokens, fig.exact) == (19.3, 8192, True)
    assert fig.source.startswith("the record's notes (7 decode samples")
    other = figure_for(seed, [], 32768)
    assert other is not None and other.exact is False and other.context_tokens == 8192


def _row(ctx: int, conc: int, decode: float | None, status: str = "observed") -> SweepRow:
    return SweepRow("s", ctx, conc, 128, decode, decode, None, None, status)


class _Sweep:
    id = "s"


def test_the_nearest_row_at_the_lowest_concurrency_wins() -> None:
    seed = load_record(SEED)
    rows = [_row(1024, 1, 30.0), _row(4096, 1, 20.0), _row(4096, 4, 90.0), _row(8192, 1, None),
            _row(6144, 1, 15.0, "failed")]
    sweeps = [(_Sweep(), rows)]
    fig = figure_for(seed, sweeps, 8192)  # type: ignore[arg-type]
    assert fig is not None and (fig.decode_tok_s, fig.context_tokens, fig.concurrency) == (20.0, 4096, 1)
    assert fig.source == "speed sweep s" and not fig.exact
    fig = figure_for(seed, [(_Sweep(), [_row(1024, 1, 30.0), _row(3072, 1, 25.0)])], 2048)  # type: ignore[list-item]
    assert fig is not None and fig.context_tokens == 3072  # a tie goes to the larger context


def test_runnable_needs_every_check() -> None:
    def cand(*oks: bool | None) -> Candidate:
        names = ("hardware", "engine", "model", "memory")
        return Candidate("r", 1, None, None, None, None,
                         tuple(RunCheck(n, ok, "x") for n, ok in zip(names, oks, strict=True)))  # type: ignore[arg-type]

    assert cand(True, True, True, True).runnable == "yes"
    assert cand(True, True, None, True).runnable == "unknown"
    assert cand(True, False, None, True).runnable == "no"
    assert cand(False, True, True, True).why_not() == ["hardware: x"]


def _host(hw: str = "cpu-x-2c-24gb") -> HostFacts:
    return HostFacts(hw, "Test CPU", 24 << 30, 20 << 30, None, Path("/nonexistent"), None, probe=lambda n: None)  # type: ignore[arg-type,return-value]


def test_hardware_and_model_checks() -> None:
    seed = load_record(SEED)
    c = check_hardware(seed, _host())
    assert c.ok is False and c.detail == "recorded on dgx-spark-gb10-128gb ×1; this host is cpu-x-2c-24gb (Test CPU)"
    assert check_hardware(seed, _host("dgx-spark-gb10-128gb")).ok is True
    from servepack.registry.choose import LocalModel, ModelPins
    pins = ModelPins(("a" * 64,), ("m.gguf",))
    good = LocalModel(Path("/x/m.gguf"), 10, "a" * 64, "by name")
    bad = LocalModel(Path("/y/m.gguf"), 10, "b" * 64, "by name")
    unknown = LocalModel(Path("/z/m.gguf"), 10, None, "by name")
    assert check_model(pins, [bad, good])[0].ok is True
    assert check_model(pins, [bad])[0].ok is False
    assert check_model(pins, [bad, unknown])[0].ok is None
    assert check_model(pins, [])[0].ok is False
    assert check_model(ModelPins((), ("m.gguf",)), [bad])[0].ok is True  # nothing pinned: found by name


def test_content_hash_ignores_key_order_not_values() -> None:
    assert content_sha256({"a": 1, "b": "é"}) == content_sha256({"b": "é", "a": 1})
    assert content_sha256({"a": 1}) != content_sha256({"a": 2})


V1 = {"schema_version": "local-ai-registry/v1"}


@pytest.mark.parametrize(("doc", "folder", "kind"), [
    ({**V1, "recipe_id": "x", "rows": []}, "anywhere", "speed_sweep"),
    ({**V1, "recipe_source": "x"}, "anywhere", "recipe"),
    ({"data": {**V1, "id": "x", "launch": {}}, "meta": {}}, "anywhere", "recipe"),  # an API envelope
    ({**V1, "id": "h"}, "recipe", "recipe"),  # checked there as a recipe, so refused
    ({**V1, "id": "h"}, "speed-sweep", "speed_sweep"),
    ({**V1, "id": "h", "vendor": "nvidia"}, "hardware", "hardware"),
    ({**V1, "id": "b", "name": "B", "category": None, "rows": []}, "benchmark", "benchmark"),
    ({**V1, "id": "b", "name": "B", "category": None, "rows": []}, "anywhere", "benchmark"),
    ({**V1, "id": "m", "params": 7}, "anywhere", "model"),
    ({**V1, "id": "m--q4", "model_id": "m", "weights": {}}, "anywhere", "model_instance"),
    ({"model": "m", "weights": "a/b@" + "0" * 40, "engine": "p@1", "set": {}, "card": "c", "proof": []},
     "c", "lab_recipe"),
    ({"recipe": {"model": "m"}, "passed": True, "proof": {}}, "runs", "lab_run"),
    ({"id": "p", "engine": "llama.cpp", "image": "i", "args": []}, "engines", "engine_profile"),
    ({"recipe_id": "x", "rows": []}, "anywhere", None),  # no schema_version outside a collection: no record
    ({"collections": {}, "counts": {}}, "index", None),  # the registry's index: skipped in a folder
    ([1, 2], "recipe", None),
    ([1, 2], "elsewhere", None),
])
def test_what_a_document_is_taken_for(doc: object, folder: str, kind: str | None) -> None:
    assert _kind_of(doc, Path("/r") / folder / "f.json") == kind


class _Held:
    """A held sweep as check_memory reads it: its id and its record."""

    def __init__(self, record: dict[str, object]) -> None:
        self.id = "s"
        self.loaded = type("L", (), {"record": record})()


def test_memory_from_the_gguf_header_and_the_kv_cache(tmp_path: Path) -> None:
    import sys
    sys.path.insert(0, str(Path(__file__).parents[1] / "core"))
    from gguf_writer import write_gguf

    from servepack.registry.choose import GIB, LocalModel, check_memory

    model = tmp_path / "m.gguf"
    write_gguf(model, {"general.architecture": "llama", "llama.block_count": 32, "llama.attention.head_count": 32,
                       "llama.attention.head_count_kv": 8, "llama.embedding_length": 4096}, [("w", (64,), 0)])
    seed = load_record(SEED)  # launches with --ctx-size 9280 and q4_0 K and V
    local = LocalModel(model, 30 * GIB, None, "test")  # sized as a 30 GiB file would be
    kv = 32 * 9280 * 8 * (128 * 18 / 32 + 128 * 18 / 32)
    host = _host()  # 20 GiB available
    c = check_memory(seed, host, local, 8192, [])
    assert c.ok is False
    assert c.detail.startswith(f"needs {(30 * GIB + int(kv)) / GIB:.2f} GiB (GGUF 30.00 GiB + KV cache "
                               f"{int(kv) / GIB:.2f} GiB at 9,280 tokens (q4_0/q4_0)) beyond this host's 20.0 GiB")
    small = LocalModel(model, 1 * GIB, None, "test")
    assert check_memory(seed, host, small, 8192, []).ok is True


def test_memory_stated_by_the_record_without_a_local_file() -> None:
    from servepack.registry.choose import check_memory

    seed = load_record(SEED)
    held = _Held({"metrics": {"peak_memory_bytes": str(25 << 30)}, "rows": []})
    c = check_memory(seed, _host(), None, 8192, [(held, [])])  # type: ignore[list-item]
    assert c.ok is False and c.detail.startswith("peak memory 25.00 GiB stated by sweep s, beyond this host's")
    held = _Held({"metrics": {}, "rows": [{"peak_vram_gb": 4.5, "context_tokens": 8192}, {"peak_vram_gb": None}]})
    c = check_memory(seed, _host(), None, 8192, [(held, [])])  # type: ignore[list-item]
    assert c.ok is True and c.detail.startswith("peak VRAM 4.50 GB stated by sweep s at 8,192 tokens, within")
    # The wrong answer: memory measured at 8,192 tokens called "ok" for 32,768 (more KV cache) — unknown instead.
    c = check_memory(seed, _host(), None, 32768, [(held, [])])  # type: ignore[list-item]
    assert c.ok is None and "measured at 8,192 tokens; 32,768 tokens need more KV cache, not known to fit" in c.detail
    held = _Held({"metrics": {}, "rows": [{"peak_vram_gb": 4.5}]})
    c = check_memory(seed, _host(), None, 8192, [(held, [])])  # type: ignore[list-item]
    assert c.ok is None and "at a context it does not state" in c.detail
    c = check_memory(seed, _host(), None, 8192, [])
    assert c.ok is None and c.detail.startswith("not known: no local GGUF")


def test_a_command_with_an_empty_model_flag_names_no_file() -> None:
    import dataclasses

    seed = load_record(SEED)
    record = {**seed.record, "metadata": {"localmaxxing": {
        "notes": "", "observed_command": "llama-bench -m  -p 512 -ctk f16",
        "tokenized": {"arguments": ["llama-bench", "-m", "-p", "512", "-ctk", "f16"], "fidelity": "faithful"}}}}
    bench = dataclasses.replace(seed, record=record)
    assert model_pins(bench).file_names == ()  # not "-p"
    assert model_pins(seed).file_names == ("laguna-s-2.1-Q4_K_M.gguf",)
