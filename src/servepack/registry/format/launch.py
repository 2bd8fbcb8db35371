"""A record's launch as it is stored: a script launch's steps as argv lists, and a lab recipe's engine (its
profile, or a legacy `registry@<id>` recipe) and its launch rendered from the profile held beside it."""

from __future__ import annotations

import re
import shlex
from typing import Any

from servepack.registry.format.lab_launch import CannotRender, LabLaunch, render_lab_launch
from servepack.registry.format.record import LoadedRecord

_ENV_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def launch_steps(launch: dict[str, Any]) -> tuple[str | None, list[list[str]]]:
    """A script launch's steps as argv lists, and the field they were read from. The registry's script launches
    give them as shell lines under launch.script.steps (e.g. "./start.sh serve", or prose); servepack's own exports
    as argv lists under launch.steps. A line is split as the shell would (leading VAR=value assignments dropped);
    one that does not split (unbalanced quotes) is skipped."""
    script: dict[str, Any] = launch["script"] if isinstance(launch.get("script"), dict) else {}
    for where, steps in (("launch.script.steps", script.get("steps")), ("launch.steps", launch.get("steps"))):
        if not isinstance(steps, list) or not steps:
            continue
        out: list[list[str]] = []
        for step in steps:
            argv: list[str] = []
            if isinstance(step, list) and all(isinstance(a, str) for a in step):
                argv = list(step)
            elif isinstance(step, str):
                try:
                    argv = shlex.split(step)
                except ValueError:
                    continue
            while argv and _ENV_ASSIGN.match(argv[0]):
                argv.pop(0)
            if argv:
                out.append(argv)
        return where, out
    return None, []


def lab_legacy_recipe(record: dict[str, Any]) -> str | None:
    """`registry@<id>` in a lab recipe's `engine`: a recipe validated before the lab, whose launch lab.py renders from
    the registry recipe <id> as the registry's plugin export carries it (lab.py render → legacy), not from an engine
    profile; so `registry` is no engine and no profile."""
    ref = record.get("engine")
    if isinstance(ref, str) and ref.startswith("registry@"):
        return ref.split("@", 1)[1] or None
    return None


def lab_engine_name(record: dict[str, Any], profile: object) -> str | None:
    """The engine a lab recipe runs: its engine profile's `engine` field, else the profile id's engine part
    (`tabbyapi-exl3@0f83e6198dc3` → `tabbyapi`): the lab's profiles need not name it (its TabbyAPI one does not).
    None for a legacy recipe (`registry@<id>`): its engine is that registry recipe's."""
    if lab_legacy_recipe(record):
        return None
    named = profile.get("engine") if isinstance(profile, dict) else None
    if isinstance(named, str) and named:
        return named
    return str(record.get("engine") or "").split("@", 1)[0].split("-", 1)[0] or None


def lab_launch_of(loaded: LoadedRecord) -> LabLaunch | CannotRender | None:
    """A lab recipe's launch rendered from the engine profile held beside it (`render_lab_launch`), or why it cannot
    be rendered; None for any other record, a legacy lab recipe (`registry@<id>`) or one whose profile is not held."""
    if loaded.kind != "lab_recipe" or lab_legacy_recipe(loaded.record) or "engine_profile" not in loaded.related:
        return None
    try:
        return render_lab_launch(loaded.record, loaded.related["engine_profile"])
    except CannotRender as exc:
        return exc


LAB_PROFILE_FIX = ("keep the registry's engines/ folder (engines/<profile id>.json) at the top of the checkout that "
                   "holds the recipe, or import that folder")
