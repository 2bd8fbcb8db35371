"""A reproduction's registry records name the record they reproduce, inside the registry's schema.

The exported recipe gains a provenance source of kind `reproduced-record` (the original's file or URL), the
original's id, sha256 and source under `metadata.servepack.reproduces` with the verdicts, and a sentence in its
notes; the speed sweep gains the same provenance source. Nothing else of the export changes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPRODUCED_KIND = "reproduced-record"


@dataclass(frozen=True)
class Original:
    """The record a run reproduces: its id, the sha256 of its bytes, and where it was read."""

    id: str
    sha256: str
    source: str
    origin_url: str | None = None
    held: str | None = None  # "registry id X version N of M" when read from the local registry

    @property
    def url(self) -> str:
        """A URL for the registry's `source.url`: the file's URI, or the URL it came from."""
        if "://" in self.source:
            return self.source
        return Path(self.source).resolve().as_uri()


def _sources(original: Original, at: str) -> list[dict[str, Any]]:
    out = [{"kind": REPRODUCED_KIND, "url": original.url, "captured_at": at}]
    if original.origin_url and original.origin_url != original.url:
        out.append({"kind": f"{REPRODUCED_KIND}-origin", "url": original.origin_url, "captured_at": at})
    return out


def sentence(original: Original, verdicts: list[dict[str, Any]]) -> str:
    """The notes' sentence: which record, and each metric's verdict."""
    said = "; ".join(f"{v['metric']} at {v['cell']} {v['verdict']}" for v in verdicts) or "no metric judged"
    return (f"Reproduction of registry record {original.id} (sha256 {original.sha256} of {original.source}): "
            f"{said}.")


def amend(recipe: dict[str, Any], sweep: dict[str, Any], original: Original, *, at: str,
          report: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Copies of the exported records that name the original; `report` holds the verdicts and the facts."""
    recipe, sweep = copy.deepcopy(recipe), copy.deepcopy(sweep)
    meta = recipe.setdefault("metadata", {}).setdefault("servepack", {})
    meta["reproduces"] = {"record_id": original.id, "record_sha256": original.sha256,
                          "record_source": original.source, "record_origin_url": original.origin_url,
                          "record_held": original.held, **report}
    notes = meta.get("notes")
    meta["notes"] = " ".join(p for p in (notes, sentence(original, report.get("verdicts", []))) if p)
    recipe["description"] = f"servepack reproduction of registry record {original.id}. " + (recipe.get("description")
                                                                                             or "")
    for doc in (recipe, sweep):
        prov = doc.setdefault("provenance", {"sources": [], "captured_at": at})
        prov["sources"] = list(prov.get("sources", [])) + _sources(original, at)
    return recipe, sweep
