"""Issue 31 item 7: `registry list` (text and --json) is answered from the index in a few queries, and shows exactly
what it showed when it read every record itself (bytes parsed, secrets redacted, a query or three per record).

The reference here is that old way, kept: every recipe, sweep and held instance read one by one as a full
`StoredRecord` (`recipes`, `sweeps_of`, `orphan_sweeps`, `get`). The tree holds each case where the index alone
would be wrong: a recipe carrying keys (its `redacted` places), an API envelope whose model id the index folds, a
held instance whose model id is spelled with capitals and dots, a sweep imported without metrics (a note only the
check makes), a second version, a sweep whose recipe is not held, a lab recipe rendered from its engine profile.
The wrong answers: a list that reads every record (the spy counts them), one that skips a record holding a key, a
record listed from the index whose secrets were not looked for but printed as if none.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.registry.db import RegistryDB
from servepack.registry.format.record import METRICS_MISSING
from servepack.registry.queries import Listed, Listing, RegistryReads, StoredRecord

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"
KEY = "sk-listidx-0a9b8c7d6e5f"
ODD_MODEL = "Odd.Model-7B"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _write(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("listidx")
    tree = root / "registry"
    shutil.copytree(TREE, tree)
    native = json.loads((TREE / "recipe" / "wren-7b-native.json").read_text())
    sweep = json.loads((TREE / "speed-sweep" / "wren-7b-native-sweep.json").read_text())
    instance = json.loads((TREE / "model-instance" / "acme-wren-7b-gguf--q4-k-m.json").read_text())
    keyed = json.loads(json.dumps(native))
    keyed["id"] = "wren-7b-keyed"
    keyed["launch"]["arguments"] += ["--api-key", KEY]
    keyed["metadata"]["servepack"]["observed_command"] = f"llama-server --api-key {KEY} --port 8080"
    _write(tree / "recipe" / "wren-7b-keyed.json", keyed)
    enveloped = {**json.loads(json.dumps(native)), "id": "wren-7b-enveloped"}
    enveloped["relationships"] = {"model": {"id": "Wren-7B.Q4", "name": "Wren 7B"}}
    _write(tree / "recipe" / "wren-7b-enveloped.json", {"data": enveloped, "meta": {"source": "api"}})
    _write(tree / "model-instance" / "acme-odd-gguf.json", {**instance, "id": "acme-odd-gguf", "model_id": ODD_MODEL})
    _write(tree / "recipe" / "odd-native.json", {**json.loads(json.dumps(native)), "id": "odd-native",
                                                 "model_instance_id": "acme-odd-gguf"})
    no_metrics = {k: v for k, v in sweep.items() if k != "metrics"} | {"id": "odd-native-sweep",
                                                                       "recipe_id": "odd-native"}
    _write(tree / "speed-sweep" / "odd-native-sweep.json", no_metrics)
    _write(tree / "speed-sweep" / "orphan-sweep.json", {**sweep, "id": "orphan-sweep", "recipe_id": "nowhere"})
    path = root / "r.sqlite3"
    code, out, err = _run("registry", "import", str(tree), "--db", str(path))
    assert code == 0, out + err
    again = json.loads(json.dumps(native))
    again["metadata"]["servepack"]["observed_command"] = "llama-server --port 8081"  # version 2
    _write(root / "v2" / "recipe" / "wren-7b-native.json", again)
    code, out, err = _run("registry", "import", str(root / "v2"), "--db", str(path))
    assert code == 0 and "new version" in out + err, out + err
    return path


def _held_model(db: RegistryDB, rec: StoredRecord) -> str | None:
    """The model the list named before: the record's own, else its held instance's as that record spells it."""
    if rec.model_id or not rec.fields.model_instance_id:
        return rec.model_id
    inst = db.get(rec.fields.model_instance_id, kind="model_instance")
    model = inst.loaded.record.get("model_id") if inst is not None else None
    return model if isinstance(model, str) and model else None


def _read_one_by_one(self: RegistryReads, *, model: str | None = None, hardware_id: str | None = None,
                     engine: str | None = None, min_context: int | None = None, detail: bool = False) -> Listing:
    """The list as it was read before: every record read itself, its sweeps and its instance queried one by one."""
    assert isinstance(self, RegistryDB)
    recipes = self.recipes(model=model, hardware_id=hardware_id, engine=engine, min_context=min_context)
    filtered = any(x is not None for x in (model, hardware_id, engine, min_context))
    return Listing([r.listed() for r in recipes], {r.id: [s.listed() for s in self.sweeps_of(r.id)] for r in recipes},
                   {r.id: _held_model(self, r) for r in recipes},
                   [] if filtered else [s.listed() for s in self.orphan_sweeps()], self.counts())


def _brief(listing: Listing) -> Listing:
    def no(x: Listed) -> Listed:
        return replace(x, sources=None, normalised=None, redacted=None)
    return Listing([no(r) for r in listing.recipes], {k: [no(s) for s in v] for k, v in listing.sweeps.items()},
                   listing.models, [no(s) for s in listing.orphans], listing.counts)


FILTERS: list[dict[str, Any]] = [{}, {"model": "wren-7b"}, {"model": ODD_MODEL}, {"hardware_id": "ferro-gpu-24gb"},
                                 {"engine": "LLAMA.CPP"}, {"min_context": 8192}, {"min_context": 1 << 20},
                                 {"model": "no-such-model"}]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()) or "all")
def test_the_listing_from_the_index_is_the_records_read_one_by_one(db: Path, filters: dict[str, Any]) -> None:
    with RegistryDB.open(db) as opened:
        want = _read_one_by_one(opened, **filters)
        assert opened.listing(**filters, detail=True) == want
        assert _brief(opened.listing(**filters)) == _brief(want)
    if not filters:
        ids = {r.id for r in want.recipes}
        assert {"wren-7b-keyed", "wren-7b-enveloped", "odd-native", "wren-7b-native"} <= ids
        assert [s.id for s in want.orphans] == ["orphan-sweep"]
        assert want.models["odd-native"] == ODD_MODEL and want.models["wren-7b-enveloped"] == "Wren-7B.Q4"
        native = next(r for r in want.recipes if r.id == "wren-7b-native")
        assert (native.version, native.versions) == (2, 2)
        (no_metrics,) = want.sweeps["odd-native"]
        assert METRICS_MISSING not in no_metrics.normalised and no_metrics.normalised  # its times, not the check's
        keyed = next(r for r in want.recipes if r.id == "wren-7b-keyed")
        assert "launch.arguments[15] (--api-key)" in (keyed.redacted or ())  # the wrong answer: listed as clean


def test_only_the_records_a_shown_field_needs_are_read(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[str] = []
    stored = RegistryReads._stored

    def spy(self: RegistryReads, row: tuple[Any, ...]) -> StoredRecord:
        read.append(row[1])
        return stored(self, row)

    monkeypatch.setattr(RegistryReads, "_stored", spy)
    with RegistryDB.open(db) as opened:
        text = opened.listing()
        text_reads = set(read)
        read.clear()
        detail = opened.listing(detail=True)
    lab = {r.id for r in text.recipes if r.kind == "lab_recipe"}
    assert lab and lab <= text_reads  # rendered from the engine profile
    assert {"wren-7b-enveloped", "acme-odd-gguf", "acme-wren-7b-gguf--q4-k-m"} <= text_reads
    assert not text_reads & {"wren-7b-native", "wren-7b-keyed", "odd-native", "wren-7b-native-sweep", "orphan-sweep"}
    assert "wren-7b-keyed" in set(read)  # its bytes may hold a key: read and redacted for --json
    assert not set(read) & {"wren-7b-native", "odd-native", "wren-7b-native-sweep", "orphan-sweep"}
    fast = next(r for r in text.recipes if r.id == "wren-7b-native")
    assert fast.redacted is None
    with pytest.raises(ValueError, match="secrets"):
        fast.as_dict()  # never printed as if it held none
    assert next(r for r in detail.recipes if r.id == "wren-7b-native").as_dict()["redacted"] == []


@pytest.mark.parametrize("args", [(), ("--json",), ("--model", "wren-7b"), ("--model", "wren-7b", "--json"),
                                  ("--context", "8192"), ("--engine", "llama.cpp", "--json")])
def test_list_prints_what_it_printed_reading_every_record(db: Path, monkeypatch: pytest.MonkeyPatch,
                                                          args: tuple[str, ...]) -> None:
    code, now, err = _run("registry", "list", "--db", str(db), *args)
    assert code == 0, err
    monkeypatch.setattr(RegistryReads, "listing", _read_one_by_one)
    code, before, err = _run("registry", "list", "--db", str(db), *args)
    assert code == 0, err
    assert now == before
    assert KEY not in now
    if args == ("--json",):
        keyed = next(r for r in json.loads(now)["recipes"] if r["id"] == "wren-7b-keyed")
        assert "metadata.servepack.observed_command (--api-key)" in keyed["redacted"]


def _loaded(db: Path, args: tuple[str, ...], before: str = "") -> tuple[str, str]:
    """The modules a fresh interpreter holds after `registry list --db DB ARGS` (after running `before`), and
    what the list printed."""
    probe = (
        "import sys\n"
        f"{before}\n"
        "from servepack.cli.main import cli\n"
        "try:\n"
        f"    cli(['registry', 'list', '--db', {str(db)!r}, *{list(args)!r}], prog_name='servepack')\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print('LOADED', sorted(sys.modules), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return out.stderr.split("LOADED", 1)[1], out.stdout


@pytest.mark.parametrize("args", [(), ("--json",)])
def test_list_imports_nothing_of_runs_the_export_or_choose(db: Path, args: tuple[str, ...]) -> None:
    """`registry list` (text and --json) starts in a fraction of a second: its group's other commands import what
    they run when they run, a record is checked (jsonschema) only on import, --context's bound is read from the
    pack schema only when a value is given, the results store asks whether a value is a pydantic model without
    importing pydantic, and rich (progress lines, tables) is loaded only when one is shown (the wrong answer: the
    group's module importing runs, comparisons, the export, choose's host checks, the pack schema's models,
    pydantic or rich)."""
    loaded, printed = _loaded(db, args)
    assert "'servepack.registry.queries'" in loaded and "wren-7b-native" in printed  # the probe sees the list
    for heavy in ("servepack.records", "servepack.bench", "servepack.registry.choose", "servepack.registry.checks",
                  "servepack.registry.host_facts", "servepack.registry.export", "servepack.host.fingerprint",
                  "servepack.pipeline", "servepack.packs.schema", "jsonschema", "httpx", "pydantic", "rich"):
        assert f"'{heavy}" not in loaded, heavy


def test_the_import_probe_sees_pydantic_and_rich_when_they_are_loaded(db: Path) -> None:
    """The wrong answer for the test above: the same probe, after something imports the pack schema and shows a
    progress line, names pydantic and rich (so their absence above is measured, not a probe that sees nothing)."""
    loaded, printed = _loaded(db, ("--json",), "import servepack.packs.schema\n"
                              "from servepack.cli.render import progress; progress('probe')")
    assert "wren-7b-native" in printed
    assert "'pydantic'" in loaded and "'rich'" in loaded
