"""A record's launch as it is stored: a script launch's steps as argv lists, a lab recipe's engine (its profile, or a
legacy `registry@<id>` recipe) and its launch rendered from the profile held beside it, and every part of any launch
as lines to show (`describe_launch`)."""

from __future__ import annotations

import re
import shlex
from typing import Any

from servepack.redact import redact_argv, redact_document
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


def _words(value: Any) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return shlex.join(value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return "; ".join(_words(v) for v in value)
    return str(value)


def describe_launch(loaded: LoadedRecord) -> list[tuple[str, str]]:
    """Every part of a record's launch as the record states it, one (label, value) line each, secrets redacted:
    kind, binary or entrypoint, image, arguments, environment, mounts, ports, a script's file and every step, a
    compose file, a reference's address, a lab recipe's rendered profile (image, program, args, env, config lines);
    what servepack shows whether or not it can run it here."""
    rows: list[tuple[str, str]] = []
    if loaded.kind == "lab_recipe":
        rendered = lab_launch_of(loaded)
        profile = loaded.related.get("engine_profile")
        rows.append(("kind", f"lab recipe, engine {loaded.record.get('engine')}"))
        if isinstance(rendered, LabLaunch):
            rows += [("image", str(rendered.image or "(none: on the host)")),
                     ("program", str(rendered.program or "(the image's own entrypoint)")),
                     ("args", shlex.join(redact_argv(["p", *rendered.args])[1:])),
                     ("settings", rendered.settings_words())]
            if rendered.config_text is not None:
                lines = redact_document(rendered.config_text.splitlines())[0]
                rows += [("config", f"{rendered.config_at or '(no place stated)'}")] + [("config line", line)
                                                                                        for line in lines]
        elif isinstance(rendered, CannotRender):
            rows.append(("launch", str(rendered)))
        else:
            rows.append(("launch", "its engine profile is not held"))
        if isinstance(profile, dict) and isinstance(profile.get("env"), dict) and profile["env"]:
            rows.append(("env", _words(redact_document(profile["env"])[0])))
        return rows
    launch: dict[str, Any] = loaded.record["launch"] if isinstance(loaded.record.get("launch"), dict) else {}
    clean: dict[str, Any] = redact_document(launch)[0]
    rows.append(("kind", str(clean.get("kind") or "not stated")))
    container: dict[str, Any] = clean["container"] if isinstance(clean.get("container"), dict) else {}
    for label, key in (("binary", "binary"), ("entrypoint", "entrypoint"), ("image", "image"),
                       ("arguments", "arguments"), ("env", "env"), ("environment", "environment"),
                       ("mounts", "mounts"), ("volumes", "volumes"), ("host port", "host_port"),
                       ("container port", "container_port"), ("compose file", "compose_file"), ("url", "url")):
        if clean.get(key) not in (None, "", [], {}):
            rows.append((label, _words(clean[key])))
    if container.get("image") and not clean.get("image"):
        rows.append(("image", str(container["image"]) + (f" ({container.get('digest')})" if container.get("digest")
                                                         else "")))
    script: dict[str, Any] = clean["script"] if isinstance(clean.get("script"), dict) else {}
    if script.get("file"):
        rows.append(("script", str(script["file"])))
    where, steps = launch_steps(clean)
    rows += [(f"step {i + 1}", shlex.join(step)) for i, step in enumerate(steps)] if where else []
    draft = loaded.record.get("draft_launch")
    if isinstance(draft, dict):
        rows.append(("draft launch", f"docker image {draft.get('image')} (synthesized, never a launch contract)"))
    return rows
