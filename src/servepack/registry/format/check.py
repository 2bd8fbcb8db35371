"""The local-ai-registry's published rules, applied to an export folder before a maintainer sees it.

A folder holds the registry's collections (`hardware/`, `model/`, `model-instance/`, `recipe/`, `speed-sweep/`), one
`<id>.json` record per file. Every rule below is servepack's own encoding of what the registry publishes (its JSON
Schemas under data/registry/schema/, its cross-record validator, its trust rules and its formatter; the upstream
commits and the date they were read are in schemas/registry_catalog.json):

- each record matches the schema of its collection; its id equals its file name; schema_version is v1;
- the file is in the registry's canonical form: 2-space indent, sorted keys, UTF-8 written as is, trailing newline;
- references resolve, in the folder or in the registry's catalog: model instance, hardware, model; speed-sweep ids
  and a sweep's recipe only in the folder (a submission brings its own evidence);
- facts: a known/unknown/unavailable/not_applicable state, a reason unless known, no duplicated value, and a path
  that names a field of the record;
- a recipe's `status` is what the trust rules derive; a non-container launch carries container state none;
- a hardware record lists no products unless price records name it (an export has none).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servepack.errors import UsageError
from servepack.redact import document_secrets, scrub_message
from servepack.safepath import read_bounded

if TYPE_CHECKING:  # imported when a record is checked: reading one back (`registry list`, show) needs none of it
    from importlib.abc import Traversable

    import jsonschema

REGISTRY_SCHEMA_VERSION = "local-ai-registry/v1"
MAX_RECORD_BYTES = 4 << 20  # the largest registry record is tens of KiB; a bigger file is not a record
# collection folder → schema file stem
COLLECTIONS = {"hardware": "hardware", "model": "model", "model-instance": "model_instance", "recipe": "recipe",
               "speed-sweep": "speed_sweep"}
FACT_STATES = ("known", "unknown", "unavailable", "not_applicable")
EXECUTABLE_LAUNCH = ("docker", "compose", "script", "host")
CONTAINER_LAUNCH = ("reference", "docker", "docker-compose")
FULL_REVISION = re.compile(r"^[0-9a-f]{40}$")
IMAGE_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
SCRIPT_COMMIT = re.compile(r"(?:^|/)[0-9a-f]{40}/")
FORBIDDEN_LAUNCH = ("--enforce-eager", "disable-cuda-graph", "disable-prefill-cuda-graph")
# Sweeps the registry counts as acceptance evidence come from its own campaign repositories or its acceptance runs.
EVIDENCE_ORG = "https://github.com/0xSero/"
_REQUIRED = re.compile(r"^'(?P<name>[^']+)' is a required property$")


@dataclass(frozen=True)
class Problem:
    """One broken rule: the file (relative to the folder), the field, and what is wrong."""

    file: str
    field: str
    message: str

    def line(self) -> str:
        return f"{self.file}: {self.field}: {self.message}"


@dataclass(frozen=True)
class Catalog:
    """Ids the registry already holds (a record may reference them without bringing them), and where they came from."""

    hardware_ids: frozenset[str]
    model_instance_ids: frozenset[str]
    model_ids: frozenset[str]
    gpu_names: tuple[tuple[str, str], ...]
    gpu_name_drop: tuple[str, ...]
    registry: dict[str, Any] = field(default_factory=dict)

    @property
    def target(self) -> str:
        """The upstream version an export targets, in one line."""
        r = self.registry
        return (f"{r.get('schema_version')} as published at {r.get('repository')} (schemas at commit "
                f"{r.get('rules_from', [{}])[0].get('commit', '?')[:12]}, hardware catalog at "
                f"{r.get('hardware_ids_from', {}).get('commit', '?')[:12]}, read {r.get('taken_at')})")


def _format_file(name: str) -> Traversable:
    """A file shipped in this package; importlib.resources (and the tempfile, shutil and archives it loads) is
    imported when one is first read, so reading a record back (`registry list`) starts without it."""
    from importlib import resources

    return resources.files("servepack.registry.format").joinpath(name)


@cache
def catalog() -> Catalog:
    doc = json.loads(_format_file("schemas/registry_catalog.json").read_text())
    return Catalog(hardware_ids=frozenset(doc["hardware_ids"]), model_instance_ids=frozenset(doc["model_instance_ids"]),
                   model_ids=frozenset(doc["model_ids"]),
                   gpu_names=tuple((g["pattern"], g["id"]) for g in doc["gpu_names"]),
                   gpu_name_drop=tuple(doc["gpu_name_drop"]), registry=doc["registry"])


_SURROGATE = re.compile("[\ud800-\udfff]")


def load_json(raw: bytes | str) -> Any:
    """A registry record's JSON, read as text: ValueError naming why not for what is no JSON, nests too deeply, or
    holds a lone UTF-16 surrogate in a string (`"\\ud800"`: JSON allows the escape, but it is no text; hashing,
    storing or printing the record would fail). The one reader of record JSON (show, import, check, reproduce)."""
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    todo: list[Any] = [doc]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, str) and (bad := _SURROGATE.search(item)):
            raise ValueError(f"a string holds \\u{ord(bad.group()):04x}, a lone UTF-16 surrogate, which is no text")
    return doc


@cache
def collection_schema(stem: str) -> dict[str, Any]:
    text = _format_file(f"schemas/{stem}.schema.json").read_text()
    doc: dict[str, Any] = json.loads(text)
    return doc


def canonical_bytes(record: dict[str, Any]) -> bytes:
    """A record as the registry's formatter writes it."""
    return (json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def formatting_problem(data: bytes, record: dict[str, Any]) -> str | None:
    """Why `data` is not the canonical form of `record`, or None."""
    if data == canonical_bytes(record):
        return None
    if data == (json.dumps(record, indent=2, sort_keys=True) + "\n").encode():
        return "non-ASCII text written as \\u escapes; the registry writes UTF-8 as is"
    if data == (json.dumps(record, indent=2, ensure_ascii=False) + "\n").encode():
        return "keys are not sorted; the registry writes every object with sorted keys"
    return "not in the registry's canonical form (2-space indent, sorted keys, UTF-8 as is, trailing newline)"


def _schema_problems(file: str, stem: str, record: dict[str, Any]) -> list[Problem]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(collection_schema(stem))
    out = []
    for e in sorted(validator.iter_errors(record), key=lambda e: [str(p) for p in e.absolute_path]):
        path = ".".join(str(p) for p in e.absolute_path)
        m = _REQUIRED.match(e.message) if e.validator == "required" else None
        if m:
            path = f"{path}.{m['name']}" if path else m["name"]
        out.append(Problem(file, path or "(top level)", e.message if not m else "required field is missing"))
    return out


def _fact_problems(file: str, record: dict[str, Any]) -> list[Problem]:
    out = []
    for path, fact in (record.get("facts") or {}).items():
        if not isinstance(fact, dict):
            continue  # the schema names it
        where = f"facts.{path}"
        if fact.get("state") not in FACT_STATES:
            out.append(Problem(file, f"{where}.state", f"{fact.get('state')!r} is not one of {', '.join(FACT_STATES)}"))
        reason = fact.get("reason")
        good_reason = (isinstance(reason, str) and reason) or (
            isinstance(reason, dict) and isinstance(reason.get("code"), str) and reason["code"]
            and isinstance(reason.get("detail"), str) and reason["detail"])
        if fact.get("state") != "known" and not good_reason:
            out.append(Problem(file, f"{where}.reason", "a fact that is not known needs a reason (a string or "
                                                        "{code, detail})"))
        if "value" in fact:
            out.append(Problem(file, f"{where}.value", "facts must not duplicate the record's value"))
        if not path.startswith("audit."):
            target: Any = record
            for part in path.split("."):
                if not (isinstance(target, dict) and part in target):
                    out.append(Problem(file, where, f"the fact path {path!r} names no field of the record"))
                    break
                target = target[part]
    return out


def _is_acceptance_evidence(sweep: dict[str, Any] | None) -> bool:
    if not sweep or not sweep.get("accepted_at"):
        return False
    source = sweep.get("source") or {}
    if source.get("kind") == "acceptance-run":
        return True
    return bool(source.get("commit")) and str(source.get("repository") or "").startswith(EVIDENCE_ORG)


def trust_failures(recipe: dict[str, Any], instance: dict[str, Any] | None,
                   sweeps: list[dict[str, Any] | None]) -> list[str]:
    """Every reason the registry's trust rules give for not deriving `validated`; empty means validated."""
    launch = recipe.get("launch") or {}
    kind = launch.get("kind")
    why = []
    if kind not in EXECUTABLE_LAUNCH:
        why.append(f"launch kind {kind!r} is not executable (only {', '.join(EXECUTABLE_LAUNCH)} are)")
    if not FULL_REVISION.match(str((instance or {}).get("revision") or "")):
        why.append("the model instance does not pin a 40-hex revision" if instance is not None else
                   "the model instance is not in this folder, so its revision counts as unpinned")
    if kind in ("docker", "compose") and not IMAGE_DIGEST.search(str(launch.get("image") or "")):
        why.append("the image is not pinned by @sha256 digest")
    if kind == "script" and not SCRIPT_COMMIT.search(str((launch.get("script") or {}).get("file") or "")):
        why.append("the script launch has no 40-hex commit in launch.script.file")
    if kind == "host":
        if (recipe.get("engine") or {}).get("name") != "flm":
            why.append("a host launch must use the flm engine")
        if launch.get("image"):
            why.append("a host launch must not pin a docker image")
        if not isinstance(launch.get("container_port"), int):
            why.append("a host launch needs container_port")
        if launch.get("accelerator_backend") != "amd-npu":
            why.append("a host launch needs accelerator_backend amd-npu")
    if kind in ("docker", "host") and (recipe.get("serving") or {}).get("max_context_tokens") is None:
        why.append("serving.max_context_tokens is not stated")
    if kind == "docker":
        if not launch.get("entrypoint") and not launch.get("arguments"):
            why.append("the docker launch has neither entrypoint nor arguments")
        why += [f"the docker launch has no {p}" for p in ("host_port", "container_port")
                if not isinstance(launch.get(p), int)]
        if not launch.get("accelerator_backend"):
            why.append("the docker launch has no accelerator_backend")
    if not any(_is_acceptance_evidence(s) for s in sweeps):
        why.append("no attached sweep is acceptance evidence (an accepted acceptance-run, or a campaign sweep pinned "
                   "to a commit of the registry's own repositories)")
    text = json.dumps(launch).lower()
    why += [f"the launch contains the forbidden option {f}" for f in FORBIDDEN_LAUNCH if f in text]
    return why


def derive_status(recipe: dict[str, Any], instance: dict[str, Any] | None,
                  sweeps: list[dict[str, Any] | None]) -> str:
    return "candidate" if trust_failures(recipe, instance, sweeps) else "validated"


def _recipe_problems(file: str, recipe: dict[str, Any], recs: dict[str, dict[str, dict[str, Any]]],
                     cat: Catalog) -> list[Problem]:
    out = []
    instance_id = recipe.get("model_instance_id")
    if instance_id not in recs["model-instance"] and instance_id not in cat.model_instance_ids:
        out.append(Problem(file, "model_instance_id", f"{instance_id!r} is neither in this folder "
                           "(model-instance/) nor in the registry's catalog"))
    hw = recipe.get("hardware_id")
    if hw not in recs["hardware"] and hw not in cat.hardware_ids:
        out.append(Problem(file, "hardware_id", f"{hw!r} is neither in this folder (hardware/) nor in the "
                           "registry's hardware catalog"))
    sweep_ids = recipe.get("speed_sweep_ids") or []
    for sid in sweep_ids:
        if sid not in recs["speed-sweep"]:
            out.append(Problem(file, "speed_sweep_ids", f"{sid!r} resolves to no speed-sweep/{sid}.json here"))
    sweeps = [recs["speed-sweep"].get(s) for s in sweep_ids if isinstance(s, str)]
    derived = derive_status(recipe, recs["model-instance"].get(str(instance_id)), sweeps)
    if recipe.get("status") != derived:
        why = "; ".join(trust_failures(recipe, recs["model-instance"].get(str(instance_id)), sweeps))
        out.append(Problem(file, "status", f"{recipe.get('status')!r} but the registry's trust rules derive "
                           f"{derived!r}" + (f" ({why})" if why else " (every criterion holds)")))
    launch = recipe.get("launch") or {}
    container = launch.get("container")
    if not isinstance(container, dict):
        out.append(Problem(file, "launch.container", "required field is missing"))
    elif launch.get("kind") not in CONTAINER_LAUNCH and container.get("state") != "none":
        out.append(Problem(file, "launch.container.state", "a launch that is not a container has state none"))
    elif launch.get("kind") == "reference" and container.get("state") != "none":
        out.append(Problem(file, "launch.container.state", "a reference launch has state none"))
    if "command_snippet" in json.dumps(launch).lower():
        out.append(Problem(file, "launch", "a launch carries argv, never a command snippet"))
    if recipe.get("draft_launch") is not None and recipe.get("status") != "candidate":
        out.append(Problem(file, "draft_launch", "only a candidate may carry a draft launch"))
    if recipe.get("recommended") and recipe.get("status") != "validated":
        out.append(Problem(file, "recommended", "only a validated recipe may be recommended"))
    return out


def check_files(files: dict[str, bytes], cat: Catalog | None = None, *, has_prices: bool = False) -> list[Problem]:
    """Every problem in a folder given as relative path → bytes (`<collection>/<id>.json`).

    `has_prices`: the folder also holds the registry's price records (a checkout of its tree), which decide a
    hardware record's `products`; servepack does not read them, so that one rule is left to the registry.
    """
    cat = cat or catalog()
    secrets: dict[str, list[str]] = {}  # per file: its record's secret values, kept out of every message
    recs: dict[str, dict[str, dict[str, Any]]] = {c: {} for c in COLLECTIONS}
    where: dict[tuple[str, str], str] = {}
    out: list[Problem] = []
    for rel, data in sorted(files.items()):
        parts = rel.split("/")
        if len(parts) != 2 or parts[0] not in COLLECTIONS or not parts[1].endswith(".json"):
            out.append(Problem(rel, "(file)", f"not a record: the registry's collections ({', '.join(COLLECTIONS)}) "
                               "hold only <id>.json files"))
            continue
        collection, name = parts
        try:
            record = load_json(data.decode("utf-8"))
        except ValueError as exc:  # UnicodeDecodeError too
            out.append(Problem(rel, "(file)", f"not UTF-8 JSON ({str(exc)[:120] or 'nested too deeply'})"))
            continue
        if not isinstance(record, dict):
            out.append(Problem(rel, "(file)", "a record is a JSON object"))
            continue
        secrets[rel] = document_secrets(record)
        if (why := formatting_problem(data, record)) is not None:
            out.append(Problem(rel, "(formatting)", why))
        if record.get("id") != name[: -len(".json")]:
            out.append(Problem(rel, "id", f"{record.get('id')!r} does not equal the file name {name[:-5]!r}"))
        if record.get("schema_version") != REGISTRY_SCHEMA_VERSION:
            out.append(Problem(rel, "schema_version", f"{record.get('schema_version')!r} is not "
                               f"{REGISTRY_SCHEMA_VERSION!r}"))
            continue
        out += _schema_problems(rel, COLLECTIONS[collection], record)
        out += _fact_problems(rel, record)
        if isinstance(record.get("id"), str):
            recs[collection][record["id"]] = record
            where[(collection, record["id"])] = rel
    for iid, inst in recs["model-instance"].items():
        if inst.get("model_id") not in recs["model"] and inst.get("model_id") not in cat.model_ids:
            out.append(Problem(where[("model-instance", iid)], "model_id", f"{inst.get('model_id')!r} is neither in "
                               "this folder (model/) nor in the registry's catalog"))
    for hid, hw in recs["hardware"].items():
        if not has_prices and hw.get("products") != []:
            out.append(Problem(where[("hardware", hid)], "products", "must be [] here: the registry derives it from "
                               "price records, and an export brings none"))
    for rid, recipe in recs["recipe"].items():
        out += _recipe_problems(where[("recipe", rid)], recipe, recs, cat)
    for sid, sweep in recs["speed-sweep"].items():
        if sweep.get("recipe_id") not in recs["recipe"]:
            out.append(Problem(where[("speed-sweep", sid)], "recipe_id", f"{sweep.get('recipe_id')!r} resolves to "
                               "no recipe/ record here"))
    return [Problem(p.file, p.field, scrub_message(p.message, secrets.get(p.file, ()))) for p in out]


def read_folder(root: Path) -> dict[str, bytes]:
    """Every file under the collection folders of `root` (and any stray file there), relative path → bytes."""
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory; give the folder an export wrote (recipe/, speed-sweep/, ...)")
    files: dict[str, bytes] = {}
    for collection in COLLECTIONS:
        d = root / collection
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir()):
            if p.name.startswith("."):
                continue
            rel = f"{collection}/{p.name}"
            if p.is_symlink() or not p.is_file():
                files[rel] = b"\0"  # reported as not JSON; a collection holds plain files only
                continue
            files[rel] = read_bounded(p, MAX_RECORD_BYTES, "not a registry record, check the folder", follow=False)
    if not files:
        raise UsageError(f"{root}: no records under {', '.join(f'{c}/' for c in COLLECTIONS)}; give the folder an "
                         "export wrote")
    return files


def check_folder(root: Path, cat: Catalog | None = None) -> list[Problem]:
    return check_files(read_folder(root), cat, has_prices=(root / "price").is_dir())


# Reading: the registry's own schemas (vendored unchanged under schemas/upstream/, see the README there) and the
# per-record rules of its validator. An import applies only these, so it is never stricter than the registry.

UPSTREAM_SCHEMAS = {"recipe": "recipe", "speed_sweep": "speed-sweep", "benchmark": "benchmark",
                    "benchmark_run": "benchmark-run", "hardware": "hardware", "model_instance": "model-instance"}
# The registry keeps two records it calls a benchmark: a results table (`rows`; data/registry/schema, the stem
# above) and, in its registry/benchmark/ folder, a catalog entry (what a benchmark is, how it is run, its metric and
# coverage; registry/schema/benchmark.schema.json, vendored as benchmark-catalog). Each is checked by its own.
BENCHMARK_CATALOG = "benchmark-catalog"


def upstream_stem(kind: str, record: dict[str, Any] | None = None) -> str | None:
    """The vendored schema a record of `kind` is checked by: a benchmark without `rows` is a catalog entry."""
    if kind == "benchmark" and isinstance(record, dict) and "rows" not in record:
        return BENCHMARK_CATALOG
    return UPSTREAM_SCHEMAS.get(kind)
UPSTREAM_VALIDATOR = "validate_registry.py"
LAB_CHECK = "lab/lab.py check"
LAB_RECIPE_FIELDS = ("model", "weights", "engine", "set", "card", "proof")
LAB_GATES = ("load", "chat", "reasoning", "tools", "context", "speed")
LAB_MAX_RECIPE_BYTES = 1024
LAB_WEIGHTS = re.compile(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}")
LAB_BAKED = "baked-into-image"
TIME_FIELDS = {"speed_sweep": ("measured_at", "accepted_at", "metrics.latest_point_at")}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """`node` with every `common.schema.json#/$defs/…` reference replaced by the definition itself (recursively)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("common.schema.json#/$defs/") and len(node) == 1:
            return _inline(defs[ref.rsplit("/", 1)[1]], defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


@cache
def _upstream_validator(stem: str) -> jsonschema.Draft202012Validator:
    """The registry's schema `stem` as published, its references to common.schema.json resolved in memory once
    (the same rules, checked without a reference lookup per record)."""
    import jsonschema

    folder = _format_file("schemas/upstream")
    common = json.loads(folder.joinpath("common.schema.json").read_text())["$defs"]
    doc = json.loads(folder.joinpath(f"{stem}.schema.json").read_text())
    return jsonschema.Draft202012Validator(_inline(doc, common))


def upstream_schema(kind: str, record: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The registry's own schema of a record kind (of this record's form: `upstream_stem`) as vendored (None for a
    kind it publishes none for)."""
    stem = upstream_stem(kind, record)
    if stem is None:
        return None
    doc: dict[str, Any] = json.loads(json.dumps(_upstream_validator(stem).schema))
    return doc


def _where(path: Any) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _schema_rule(kind: str, record: dict[str, Any]) -> list[str]:
    stem = upstream_stem(kind, record)
    if stem is None:
        return []
    errors = sorted(_upstream_validator(stem).iter_errors(record), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{_where(e.absolute_path)}: {e.message[:200]} (upstream schema {stem}.schema.json)" for e in errors]


def _validator_rules(kind: str, record: dict[str, Any]) -> list[str]:
    """The registry validator's rules that one record can be judged by alone (references need the whole tree)."""
    out: list[str] = []
    rule = f"(upstream {UPSTREAM_VALIDATOR}"
    if kind in ("recipe", "model", "model_instance") or (kind == "hardware" and "facts" in record):
        if not isinstance(record.get("facts"), dict):
            out.append(f"facts: must be an object {rule} validate_facts)")
        else:
            out += [f"{p.field}: {p.message} {rule} validate_facts)" for p in _fact_problems("", record)]
    if kind == "model":
        params = record.get("params")
        if not isinstance(params, int | float) or isinstance(params, bool) or params <= 0:
            out.append(f"params: model params must be positive {rule}, models)")
        if not isinstance(record.get("huggingface"), dict):
            out.append(f"huggingface: identity is missing {rule} validate_huggingface)")
        if not isinstance(record.get("provenance"), dict) or not record["provenance"].get("sources"):
            out.append(f"provenance: must be an object with sources {rule} validate_provenance)")
    if kind == "recipe":
        launch: dict[str, Any] = record["launch"] if isinstance(record.get("launch"), dict) else {}
        args = launch.get("arguments")
        if args is not None and not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
            out.append(f"launch.arguments: must be a string array {rule} validate_tokenized_launch)")
        if "command_snippet" in json.dumps(launch).lower():
            out.append(f"launch: contains a command snippet {rule} validate_tokenized_launch)")
        if record.get("draft_launch") is not None and record.get("status") != "candidate":
            out.append(f"draft_launch: only allowed on candidates {rule})")
    if kind == "benchmark":
        if not record.get("name"):
            out.append(f"name: benchmark has no name {rule}, benchmarks)")
        for i, row in enumerate(record.get("rows") or []):
            score = row.get("score") if isinstance(row, dict) else None
            if score is not None and (not isinstance(score, int | float) or score < 0):
                out.append(f"rows.{i}.score: must be non-negative or null {rule}, benchmarks)")
    if kind == "speed_sweep":
        if not record.get("rows"):
            out.append(f"rows: speed sweep has no rows {rule}, speed sweeps)")
        for i, row in enumerate(record.get("rows") or []):
            for name in ("decode_tok_s", "prefill_tok_s", "ttft_ms_p50", "peak_vram_gb"):
                v = row.get(name) if isinstance(row, dict) else None
                if v is not None and (not isinstance(v, int | float) or isinstance(v, bool) or v < 0):
                    out.append(f"rows.{i}.{name}: must be non-negative or null {rule}, speed sweeps)")
    return out


def _lab_rules(kind: str, record: dict[str, Any], data: bytes, folder: str) -> list[str]:
    """The lab's own check of a recipe file (`lab.py check`), the parts one file decides; a run needs its recipe."""
    if kind == "lab_run":
        recipe = record.get("recipe")
        if not isinstance(recipe, dict) or not all(isinstance(recipe.get(k), str) for k in ("model", "engine", "card")):
            return ["recipe: a lab run names the recipe it tried (model, engine, card)"]
        return []
    out = []
    if set(record) != set(LAB_RECIPE_FIELDS):
        out.append(f"(fields): fields {sorted(record)}, the lab's are {list(LAB_RECIPE_FIELDS)} ({LAB_CHECK})")
    weights = record.get("weights")  # lab.py check: pinned, or baked into the profile's (digest-pinned) image
    if not isinstance(weights, str) or not (weights == LAB_BAKED or LAB_WEIGHTS.fullmatch(weights)):
        out.append(f"weights: not pinned as <repo>@<40-hex revision> (nor {LAB_BAKED!r}) ({LAB_CHECK})")
    if folder and folder != record.get("card"):
        out.append(f"card: {record.get('card')!r} but the file sits in folder {folder!r} ({LAB_CHECK})")
    proof = record.get("proof")
    if not isinstance(proof, list) or not proof or not isinstance(proof[0], dict):
        out.append(f"proof: a lab recipe carries its proofs, newest first ({LAB_CHECK})")
    else:
        # a reported proof (lab/import_reported.py: a third party's launch and figures, `"reported": true`) has run
        # none of the lab's gates yet; it is published as reported until a lab run replaces it
        need = (set() if proof[0].get("reported") is True else {"load", "chat"} if proof[0].get("legacy")
                else set(LAB_GATES))
        if not need <= set(str(proof[0].get("gates") or "").split()):
            out.append(f"proof.0.gates: the latest proof lacks a gate of {sorted(need)} ({LAB_CHECK})")
    if len(data) > LAB_MAX_RECIPE_BYTES:
        out.append(f"(file): {len(data)} bytes, the lab keeps a recipe to {LAB_MAX_RECIPE_BYTES} ({LAB_CHECK})")
    return out


def upstream_problems(kind: str, record: dict[str, Any], data: bytes = b"", folder: str = "") -> list[str]:
    """Every upstream rule one record breaks, each line naming the field and the rule (schema or validator); a line
    never quotes one of the record's secrets (`redact.scrub_message`), though the verdict is the record's own."""
    problems = _upstream_problems(kind, record, data, folder)
    if not problems:
        return problems
    secrets = document_secrets(record)
    return [scrub_message(p, secrets) for p in problems]


def _card_rules(record: dict[str, Any]) -> list[str]:
    """The lab's card (cards/<vendor>/<id>.json, read by lab.py card()): its id, name, vendor and backend as text,
    its memory and bandwidth, where given, as non-negative numbers."""
    out = [f"{k}: a lab card names it as text (lab/lab.py card)" for k in ("id", "name", "vendor", "backend")
           if not isinstance(record.get(k), str) or not record[k]]
    for k in ("vram_gb", "bandwidth_gb_s"):
        v = record.get(k)
        if v is not None and (not isinstance(v, int | float) or isinstance(v, bool) or v < 0):
            out.append(f"{k}: a non-negative number or null (lab/lab.py card)")
    return out


def _upstream_problems(kind: str, record: dict[str, Any], data: bytes, folder: str) -> list[str]:
    if kind in ("lab_recipe", "lab_run"):
        return _lab_rules(kind, record, data, folder)
    if kind == "card":
        return _card_rules(record)
    if kind == "engine_profile":
        # lab.py render: a container profile names its image and args; a `native` one (a program the host runs from
        # a pinned runtime, e.g. mtplx on Apple silicon) its args and no image; a `host` one its command
        launched = record.get("kind")
        need = ("id", "command") if launched == "host" else ("id", "args") if launched == "native" else \
            ("id", "image", "args")
        missing = [k for k in need if k not in record]
        what = f"a {launched} engine profile" if launched in ("host", "native") else "an engine profile"
        return [f"{k}: {what} names it (lab/lab.py render)" for k in missing]
    return _schema_rule(kind, record) + _validator_rules(kind, record)
