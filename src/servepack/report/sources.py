"""What `servepack report DIR…` reads: each DIR as a run or as a pack's results folder, into evidence."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from servepack.errors import ServepackError, UsageError
from servepack.records.claims import RunView, history, pack_of
from servepack.records.evidence import Evidence, build_evidence, evidence_for
from servepack.records.receipt import RECEIPT_NAME
from servepack.records.verify import read_receipt


@dataclass(frozen=True)
class Group:
    """One pack's evidence, and the runs whose detail (distributions, memory, smoke cases) the page draws."""

    evidence: Evidence
    focus: list[RunView]
    single_run: bool


@dataclass
class Source:
    """One DIR as given on the command line."""

    path: Path
    kind: Literal["run", "folder"]
    groups: list[Group] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def load_source(path: Path) -> Source:
    """A run directory (it has receipt.json) or a folder of run directories; anything else is a usage error."""
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory (give a run directory or a pack's results folder)")
    if (path / RECEIPT_NAME).is_file():
        receipt = read_receipt(path)
        ev = evidence_for(path, pack_of(receipt))
        here = path.resolve()
        focus = [r for r in ev.runs if r.path == here]
        return Source(path, "run", [Group(ev, focus or [ev.tip], single_run=True)])
    children = sorted(p for p in path.iterdir() if p.is_dir() and (p / RECEIPT_NAME).is_file())
    if not children:
        # The results root (results/<pack>/<run>): each pack folder in it.
        packs = sorted(p for p in path.iterdir() if p.is_dir() and any((q / RECEIPT_NAME).is_file()
                                                                      for q in p.iterdir() if q.is_dir()))
        if packs:
            src = Source(path, "folder")
            for folder in packs:
                sub = load_source(folder)
                src.groups += sub.groups
                src.problems += [f"{folder.name}: {p}" for p in sub.problems]
            return src
        raise UsageError(f"{path}: no {RECEIPT_NAME} in it, in the folders inside it, or in theirs "
                         "(give a run directory, a pack's results folder or the results folder)")
    runs = history(children[0])
    src = Source(path, "folder")
    if len(runs) < len(children):
        src.problems.append(f"{len(children) - len(runs)} of {len(children)} run folder(s) have a receipt that "
                            "does not read; they are left out")
    by_pack: dict[str, list[RunView]] = {}
    for run in runs:
        by_pack.setdefault(run.receipt.pack.id, []).append(run)
    for pack_id, group in sorted(by_pack.items()):
        try:
            pack = pack_of(group[-1].receipt)
        except ServepackError as exc:
            src.problems.append(f"pack {pack_id}: {len(group)} run(s) left out: its pack does not load ({exc})")
            continue
        ev = build_evidence(group, pack)
        focus = [r for r in ev.runs if r.path in ev.binding] or [ev.tip]
        src.groups.append(Group(ev, focus, single_run=False))
    if not src.groups:
        raise UsageError(f"{path}: no run whose pack loads: {'; '.join(src.problems)}")
    return src
