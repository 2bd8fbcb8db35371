"""Load shapes: the one table (`SHAPES`: name → `base.LoadShape`) that `--shape`, `LoadSettings.shape`, the runner of
points, the sweep and the exports read; nothing else names a shape.

Adding a shape is one module implementing `base.LoadShape` and one line in `SHAPES`.

Modules:

- `base`: What a load shape is (`LoadShape`, and `ShapeDefaults` a shape may inherit), a point's plan (`PointPlan`)
  and state (`PointState`, `SentRequest`), and the streams' staggered start (`start_slot`,
  `slot_offset`: a bench round's requests start by it too).
- `closed`: `level` streams back to back, until the point's budget or duration ends them.
- `open_loop`: arrivals at `level` requests a second on a seeded schedule; beyond the in-flight bound, dropped.
- `agent`: `level` multi-turn sessions that reuse the server's prefix cache (warm, never a claim's figures).
- `rounds`: `round`, `level` requests together, once: the shape of a bench cell's rounds, driven by the same point
  driver and sender; not in `SHAPES` (not a `--shape` of capacity).
"""

from __future__ import annotations

from servepack.bench.shapes.agent import AgentShape
from servepack.bench.shapes.base import LoadShape
from servepack.bench.shapes.closed import ClosedShape
from servepack.bench.shapes.open_loop import OpenShape
from servepack.errors import UsageError

__all__ = ["SHAPES", "LoadShape", "shape_for"]

SHAPES: dict[str, LoadShape] = {
    ClosedShape.name: ClosedShape(),
    OpenShape.name: OpenShape(),
    AgentShape.name: AgentShape(),
}


def shape_for(name: str) -> LoadShape:
    """The shape named `name`, or a UsageError listing the known ones."""
    shape = SHAPES.get(name)
    if shape is None:
        raise UsageError(f"--shape {name!r} is not a load shape; choose one of {', '.join(SHAPES)}")
    return shape
