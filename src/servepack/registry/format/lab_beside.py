"""A lab recipe's engine profile, found beside the recipe's file in the user's checkout of the registry.

The local-ai-registry keeps its lab recipes under `recipes/<card>/` (or `recipes/<vendor>/<card>/`) and the engine
profiles they render from under `engines/<profile id>.json` at the top of the same tree (`lab/lab.py` reads
`ENGINES / f"{name}.json"`). So `registry show FILE` and `reproduce FILE` of a recipe in a checkout look for its
profile there, the way a speed sweep is looked for beside its recipe:

- the walk goes up from the recipe's folder, at most `PROFILE_LEVELS` folders (the recipe's own and three above:
  the depth of `recipes/<vendor>/<card>/`), and stops at the checkout's top (`is_checkout_root`: a folder holding
  `recipes/` and `engines/`, a `.git`, or the lab's `lab/lab.py`); each folder's `engines/<id>.json` is a candidate;
- the walk follows the path as given, never a link: an `engines` folder or a profile file that is a symbolic link is
  skipped (one line), so a link never takes the read outside the user's tree; a profile is read with the project's
  bounded reader (`safepath.read_bounded`: a regular file, never a FIFO or a device, at most `MAX_RECORD_BYTES`),
  and what it refuses is skipped (one line);
- exactly one candidate that is an engine profile the registry accepts, with that id, is the profile; none, two (which
  one the recipe was proven with is not known) or one that is no such profile is `problem`, one clause naming why.

A profile's secrets are redacted as an imported one's are (`redact.redact_record_bytes`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from servepack.errors import UsageError
from servepack.redact import redact_record_bytes
from servepack.registry.format.check import MAX_RECORD_BYTES
from servepack.registry.format.launch import lab_legacy_recipe
from servepack.registry.format.record import LoadedRecord, parse_record
from servepack.safepath import name_problem, read_bounded

PROFILE_LEVELS = 4  # the recipe's folder and three above it: recipes/<vendor>/<card>/<recipe>.json
SKIPPED = "not read as the recipe's engine profile"


@dataclass(frozen=True)
class ProfileBeside:
    """What the walk found: the profile (its record, file and sha256 of its bytes), or `problem`; `skipped` names,
    one line each, every candidate passed over (a link, a FIFO, a file past the bound)."""

    profile_id: str
    profile: dict[str, Any] | None = None
    path: Path | None = None
    sha256: str | None = None
    skipped: tuple[str, ...] = ()
    problem: str | None = None  # a clause following "engine profile 'X', which …"

    def related(self) -> dict[str, Any]:
        """What `LoadedRecord.related` carries of it (see `registry.format.lab_launch_of`)."""
        out: dict[str, Any] = {"engine_profile_skipped": list(self.skipped)}
        if self.profile is not None:
            out["engine_profile"] = self.profile
            out["engine_profile_file"] = {"path": str(self.path), "sha256": self.sha256}
        else:
            out["engine_profile_missing"] = self.problem
        return out


def _lexists(path: Path) -> bool:
    return os.path.lexists(path)


def _link(path: Path) -> str:
    """One line for a symbolic link passed over."""
    try:
        to = f" (to {os.readlink(path)})"
    except OSError:
        to = ""
    return f"{path}: a symbolic link{to}, not followed: a profile is read from the checkout itself"


def is_checkout_root(folder: Path) -> bool:
    """The top of a checkout of the registry (or of a copy of its recipes and engines): the walk stops here."""
    return ((folder / "recipes").is_dir() and (folder / "engines").is_dir()) or _lexists(folder / ".git") \
        or (folder / "lab" / "lab.py").is_file()


def walk_folders(recipe_path: Path) -> list[Path]:
    """The folders looked in, nearest first: the recipe's own, up to `PROFILE_LEVELS`, ending at a checkout's top.
    The path is taken as given (made absolute, `..` folded), never resolved through a link."""
    here = Path(os.path.abspath(recipe_path)).parent
    out = []
    for _ in range(PROFILE_LEVELS):
        out.append(here)
        if is_checkout_root(here) or here.parent == here:
            break
        here = here.parent
    return out


def _bad_id(profile_id: str) -> str | None:
    """Why the recipe's profile id names no file of an engines/ folder (`<id>.json`), or None."""
    if not profile_id:
        return "is not named (the recipe's engine field names no profile id)"
    problem = name_problem(f"{profile_id}.json")
    if problem is None and profile_id.startswith("."):
        problem = "starts with a dot (a hidden file)"
    return f"names no file of an engines/ folder: the id {profile_id[:60]!r} {problem}" if problem else None


def _read(cand: Path, profile_id: str) -> tuple[dict[str, Any], str] | str:
    """The profile in `cand` (redacted) and the sha256 of its bytes; else why it is no profile of that id. A file
    that is not read at all raises UsageError (its one line)."""
    raw = read_bounded(cand, MAX_RECORD_BYTES, SKIPPED, follow=False)
    sha = hashlib.sha256(raw).hexdigest()
    try:
        loaded = parse_record(raw, cand, "engine_profile")
    except UsageError as exc:
        text = str(exc)
        return text[len(f"{cand}: "):] if text.startswith(f"{cand}: ") else text
    if loaded.record.get("id") != profile_id:
        return f"its id is {str(loaded.record.get('id'))[:80]!r}, not {profile_id!r}"
    clean, _ = redact_record_bytes(raw)
    if clean != raw:
        loaded = parse_record(clean, cand, "engine_profile", check=False)
    return loaded.record, sha


def find_profile_beside(recipe_path: Path, profile_id: str) -> ProfileBeside:
    """The engine profile `profile_id` beside the recipe at `recipe_path` (see the module docstring)."""
    bad = _bad_id(profile_id)
    if bad:
        return ProfileBeside(profile_id, problem=bad)
    folders = walk_folders(recipe_path)
    skipped: list[str] = []
    found: list[tuple[Path, dict[str, Any], str]] = []
    broken: list[tuple[Path, str]] = []
    for folder in folders:
        engines = folder / "engines"
        if not _lexists(engines):
            continue
        if engines.is_symlink():
            skipped.append(_link(engines))
            continue
        if not engines.is_dir():
            continue
        cand = engines / f"{profile_id}.json"
        if not _lexists(cand):
            continue
        if cand.is_symlink():
            skipped.append(_link(cand))
            continue
        try:
            got = _read(cand, profile_id)
        except UsageError as exc:
            skipped.append(str(exc))
            continue
        if isinstance(got, str):
            broken.append((cand, got))
        else:
            found.append((cand, *got))
    if len(found) + len(broken) > 1:
        places = [str(p) for p, *_ in found] + [str(p) for p, _ in broken]
        return ProfileBeside(profile_id, skipped=tuple(skipped), problem=(
            f"is beside this file more than once ({' and '.join(places)}): which one the recipe was proven with is "
            "not known"))
    if broken:
        path, why = broken[0]
        return ProfileBeside(profile_id, skipped=tuple(skipped), problem=(
            f"is beside this file in {path}, which is no engine profile of that id the registry accepts ({why})"))
    if not found:
        top = folders[-1]
        return ProfileBeside(profile_id, skipped=tuple(skipped), problem=(
            f"is not beside this file (no engines/{profile_id}.json in the {len(folders)} folder"
            f"{'s' if len(folders) > 1 else ''} from {folders[0]} up to {top})"))
    path, profile, sha = found[0]
    return ProfileBeside(profile_id, profile, path, sha, tuple(skipped))


def with_profile_beside(loaded: LoadedRecord) -> LoadedRecord:
    """A lab recipe read from a file, with its engine profile found beside the file (or why none is) in `related`;
    any other record, or a legacy lab recipe (`registry@<id>`: no profile), as it is."""
    if loaded.kind != "lab_recipe" or lab_legacy_recipe(loaded.record):
        return loaded
    ref = loaded.record.get("engine")
    beside = find_profile_beside(loaded.path, ref.split("@", 1)[0] if isinstance(ref, str) else "")
    return replace(loaded, related={**loaded.related, **beside.related()})
