"""What `registry show` prints of a record: its fields flattened, and a lab recipe's rendered launch or why none."""

from __future__ import annotations

from typing import Any

from servepack.registry.format.lab_launch import CannotRender, LabLaunch
from servepack.registry.format.launch import LAB_PROFILE_FIX, describe_launch, lab_launch_of, lab_legacy_recipe
from servepack.registry.format.record import LoadedRecord


def summary(loaded: LoadedRecord) -> dict[str, Any]:
    """What a record says, flattened for `registry show`."""
    r = loaded.record
    out: dict[str, Any] = {"path": str(loaded.path), "kind": loaded.kind, "id": loaded.id,
                           "envelope": loaded.envelope_meta is not None}
    if loaded.normalised:
        out["normalised"] = list(loaded.normalised)
    if loaded.kind not in ("recipe", "speed_sweep"):
        out["record"] = r
        if loaded.kind == "lab_recipe":
            out.update(_lab_launch_summary(loaded))
        return out
    if loaded.kind == "speed_sweep":
        out.update(recipe_id=r["recipe_id"], measured_at=r.get("measured_at"), metrics=r.get("metrics", {}),
                   rows=r["rows"])
        return out
    unknown = {k: f.get("reason") for k, f in r["facts"].items() if isinstance(f, dict) and f.get("state") != "known"}
    out.update(
        status=r["status"], recipe_source=r["recipe_source"], model_instance_id=r["model_instance_id"],
        hardware_id=r["hardware_id"], hardware_count=r["hardware_count"], engine=r["engine"],
        launch_kind=r["launch"]["kind"], serving=r["serving"], capabilities=r["capabilities"],
        speed_sweep_ids=r["speed_sweep_ids"], observed_command=loaded.observed_command(),
        launch_as_recorded=[{"part": k, "value": v} for k, v in describe_launch(loaded)],
        facts_not_known=unknown, captured_at=r["provenance"]["captured_at"],
        samples=[{"metric": s.metric, "n": len(s.samples), "samples": list(s.samples),
                  "median_stated": s.stated_median, "median_recomputed": round(s.median, 3),
                  "consistent": s.consistent} for s in loaded.samples],
    )
    return out


def _lab_launch_summary(loaded: LoadedRecord) -> dict[str, Any]:
    """`launch`: the lab recipe's launch rendered from its profile; else `launch_notice`, why it is not shown."""
    launch = lab_launch_of(loaded)
    # a recipe shown from its file: its profile as found beside it in the checkout (registry.format.lab_beside)
    beside: dict[str, Any] = {}
    if "engine_profile_skipped" in loaded.related:
        beside = {"launch_profile": loaded.related.get("engine_profile_file"),
                  "launch_profile_skipped": list(loaded.related["engine_profile_skipped"])}
    if isinstance(launch, LabLaunch):
        return {"launch": launch.as_dict(), "launch_settings": launch.settings_words(), **beside}
    if isinstance(launch, CannotRender):
        return {"launch": None, "launch_notice": str(launch), **beside}
    legacy = lab_legacy_recipe(loaded.record)
    if legacy:
        return {"launch": None, "launch_notice": f"the launch is that of registry recipe {legacy!r} as the registry's "
                "plugin export carries it (lab.py render: legacy), not an engine profile's"}
    ref = str(loaded.record.get("engine") or "").split("@", 1)[0]
    missing = loaded.related.get("engine_profile_missing")
    if missing:
        return {"launch": None, "launch_notice": f"the launch is rendered from engine profile {ref!r}, which "
                f"{missing}; {LAB_PROFILE_FIX} and show the recipe by its id", **beside}
    return {"launch": None, "launch_notice": f"the launch is rendered from engine profile {ref!r}, which the registry "
            "database does not hold beside this record; import the registry's engines/ folder and show the recipe "
            "by its id"}
