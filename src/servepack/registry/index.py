"""What a record is found by: the fields indexed for each record kind (`IndexFields`, `index_fields`), the one
folding of names (`slug`), and the engine and context a lab recipe's names say (`lab_engine`, `lab_context`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from servepack.registry.format import LoadedRecord


def slug(text: str) -> str:
    """Lowered, every run of other characters folded to one '-': `Qwen3.8-27B` and `qwen3-8-27b` are one name."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def int_field(v: object) -> int | None:
    """A record field that is a JSON integer (never a boolean), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def number_field(v: object) -> float | None:
    """A record field that is a JSON number (never a boolean), as a float, else None."""
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class IndexFields:
    """What a record is found by. A sweep's model, hardware and engine are its recipe's (joined at query time).

    `names`: (name, role) pairs, each name folded by `slug`: role `model_id` (the canonical model id the record
    belongs to), `instance` (a model instance id), `alias` (a documented other name: a model's name, a repository,
    a served name). `registry choose` matches a model id exactly, then aliases exactly; never a part of a name.
    """

    recipe_id: str
    model_instance_id: str | None
    hardware_id: str | None
    engine: str | None
    context_tokens: int | None
    concurrency: int | None
    model_id: str | None = None
    names: tuple[tuple[str, str], ...] = ()


def _obj(v: object) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _str(v: object) -> str | None:
    return v if isinstance(v, str) and v else None


def _names(pairs: list[tuple[object, str]]) -> tuple[tuple[str, str], ...]:
    out = []
    for value, role in pairs:
        if isinstance(value, str) and (folded := slug(value)):
            out.append((folded, role))
    return tuple(dict.fromkeys(out))


_LAB_CTX = re.compile(r"\.(\d+)k$")


def lab_engine(profile_ref: object) -> tuple[str | None, str | None]:
    """`llama.cpp-qwen3.5-9b-q4-k-m-64k@9e4536dfc7ec` → (profile id, engine name `llama.cpp`)."""
    if not isinstance(profile_ref, str) or not profile_ref or profile_ref.startswith("registry@"):
        return None, None  # registry@<id>: a legacy lab recipe, launched as registry recipe <id> (no profile)
    profile = profile_ref.split("@", 1)[0]
    return profile, profile.split("-", 1)[0] or None


def lab_context(stem: str) -> int | None:
    """The lab names a recipe <model>.<profile>.<ctx // 1024>k: the context it was proven at, to 1,024 tokens."""
    m = _LAB_CTX.search(stem)
    return int(m.group(1)) * 1024 if m else None


def index_fields(loaded: LoadedRecord) -> IndexFields:
    r, kind, rid = loaded.record, loaded.kind, loaded.id
    if kind == "speed_sweep":
        rows = [x for x in r.get("rows") or [] if isinstance(x, dict)]
        ctx = [c for c in (int_field(x.get("context_tokens")) for x in rows) if c is not None]
        conc = [c for c in (int_field(x.get("concurrency")) for x in rows) if c is not None]
        return IndexFields(str(r["recipe_id"]), None, None, None, max(ctx, default=None), max(conc, default=None))
    if kind == "recipe":
        serving: dict[str, Any] = r["serving"] if isinstance(r.get("serving"), dict) else {}
        engine: dict[str, Any] = r["engine"] if isinstance(r.get("engine"), dict) else {}
        rel = _obj(loaded.api_fields.get("relationships"))
        model = _obj(rel.get("model"))
        inst = _obj(rel.get("model_instance"))
        hf = _obj(loaded.api_fields.get("huggingface"))
        model_id = _str(model.get("id"))
        return IndexFields(rid, _str(r.get("model_instance_id")), _str(r.get("hardware_id")), _str(engine.get("name")),
                           int_field(serving.get("max_context_tokens")), int_field(serving.get("max_concurrency")),
                           slug(model_id) if model_id else None,
                           _names([(r.get("model_instance_id"), "instance"), (model_id, "model_id"),
                                   (model.get("name"), "alias"), (inst.get("id"), "instance"),
                                   (inst.get("name"), "alias"), (hf.get("repository"), "alias")]))
    if kind == "lab_recipe":
        _, engine_name = lab_engine(r.get("engine"))
        weights = str(r.get("weights") or "").split("@", 1)[0]
        model_id = slug(str(r.get("model") or "")) or None
        return IndexFields(rid, weights or None, _str(r.get("card")), engine_name, lab_context(loaded.path.stem), 1,
                           model_id, _names([(r.get("model"), "model_id"), (weights, "alias")]))
    if kind == "lab_run":
        recipe = _obj(r.get("recipe"))
        card = str(recipe.get("card") or "")
        stem = loaded.path.stem
        slug_part = stem[len(card) + 1:] if card and stem.startswith(card + ".") else stem
        of = f"{card}/{slug_part.rsplit('.', 1)[0]}" if "." in slug_part else rid
        _, engine_name = lab_engine(recipe.get("engine"))
        return IndexFields(of, None, card or None, engine_name, lab_context(slug_part.rsplit(".", 1)[0]), 1,
                           slug(str(recipe.get("model") or "")) or None, _names([(recipe.get("model"), "model_id")]))
    if kind == "model_instance":
        hf = _obj(r.get("huggingface"))
        return IndexFields(rid, rid, None, None, None, None, slug(str(r.get("model_id") or "")) or None,
                           _names([(r.get("model_id"), "model_id"), (rid, "instance"), (r.get("repository"), "alias"),
                                   (r.get("served_name"), "alias"), (hf.get("repository"), "alias")]))
    if kind == "benchmark_run":
        return IndexFields(rid, _str(r.get("model_instance_id")), None, None, None, None,
                           slug(str(r.get("model_id") or "")) or None,
                           _names([(r.get("model_id"), "model_id"), (r.get("model_instance_id"), "instance")]))
    if kind == "model":
        hf = _obj(r.get("huggingface"))
        return IndexFields(rid, None, None, None, None, None, slug(rid),
                           _names([(rid, "model_id"), (r.get("name"), "alias"), (hf.get("repository"), "alias")]))
    if kind == "hardware":
        return IndexFields(rid, None, rid, None, None, None)
    if kind == "card":
        names: list[Any] = r["names"] if isinstance(r.get("names"), list) else []
        return IndexFields(rid, None, rid, None, None, None, None,
                           _names([(r.get("name"), "card"), *((n, "card") for n in names)]))
    if kind == "engine_profile":
        return IndexFields(rid, None, None, _str(r.get("engine")), int_field(r.get("ctx")), int_field(r.get("seqs")))
    return IndexFields(rid, None, None, None, None, None)
