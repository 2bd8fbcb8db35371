"""`Strict`: the one base of servepack's pydantic records: a field nobody declared is an error, never kept or dropped.

A record that must not change after it is built adds `model_config = ConfigDict(frozen=True)` (pydantic merges it with
this base's); the pack schema adds `allow_inf_nan=False` too (`packs.schema.PackModel`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
