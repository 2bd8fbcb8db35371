"""A record whose llama-bench command says `-r 5` is reproduced with 5 samples per cell (issue 33, open item 5).

The wrong answer: the dry run explained `-r 5` as "repetitions of each test (the samples per cell)" and then ran 1
sample, the count of the one figure the record's notes state (each llama-bench figure is over its 5 repetitions).
Now the cells take the repetitions, with a line saying so; a cell that states more samples keeps them."""

from __future__ import annotations

import json
from pathlib import Path

from servepack.registry.format import parse_record
from servepack.reproduce.verdict import record_side

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"
NOTES = ("One prompt contained 512 endpoint tokens; every request generated 128 tokens at concurrency one. Decode "
         "samples were {decode} tok/s; median {median}.")


def _side(tmp_path: Path, decode: list[float], reps: str | None) -> object:
    doc = json.loads((TREE / "recipe" / "wren-7b-llama-bench.json").read_text())
    meta = doc["metadata"]["localmaxxing"]
    args = meta["tokenized"]["arguments"]
    if reps is None:
        i = args.index("-r")
        del args[i:i + 2]
    else:
        args[args.index("-r") + 1] = reps
    said = ", ".join(f"{d}" for d in decode[:-1]) + (f", and {decode[-1]}" if len(decode) > 1 else f"{decode[-1]}")
    meta["notes"] = NOTES.format(decode=said, median=sorted(decode)[len(decode) // 2])
    raw = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    path = tmp_path / "wren-7b-llama-bench.json"
    path.write_bytes(raw)
    return record_side(parse_record(raw, path), None)


def test_llama_bench_repetitions_are_the_samples_per_cell(tmp_path: Path) -> None:
    side = _side(tmp_path, [41.2], "5")
    p = side.protocol  # type: ignore[attr-defined]
    assert p is not None
    assert p.samples == 5  # the wrong answer: 1, the count of the notes' one decode figure
    assert p.bench_overrides(None)["samples"] == 5
    assert ("samples per cell: 5, the record's llama-bench -r 5 (each figure llama-bench reports is over 5 "
            "repetitions); the cells above state 1 sample(s), so 5 are run") in p.notes
    assert any(r.flag == "-r" and r.action == "protocol" for r in side.translation.rewrites)  # type: ignore[attr-defined]


def test_a_cell_stating_more_samples_keeps_them_and_a_record_without_r_is_unchanged(tmp_path: Path) -> None:
    p = _side(tmp_path, [41.0, 41.2, 41.3, 41.4, 41.5, 41.6, 41.7], "5").protocol  # type: ignore[attr-defined]
    assert p.samples == 7 and not any(n.startswith("samples per cell") for n in p.notes)
    p = _side(tmp_path, [41.2], None).protocol  # type: ignore[attr-defined]
    assert p.samples == 1 and not any(n.startswith("samples per cell") for n in p.notes)
