"""The one table of engines: a pack's `engine.name` picks the implementation here.

Adding an engine is one module implementing `servepack.engine.base.Engine` and one entry in `ENGINES`.
"""

from __future__ import annotations

from collections.abc import Callable

from servepack.engine.attach import AttachEngine
from servepack.engine.base import Engine
from servepack.engine.llamacpp import LlamaCppEngine
from servepack.engine.vllm import VllmEngine
from servepack.errors import UsageError
from servepack.settings import Settings

EngineFactory = Callable[[Settings], Engine]

ENGINES: dict[str, EngineFactory] = {
    LlamaCppEngine.name: lambda s: LlamaCppEngine(s),
    AttachEngine.name: lambda s: AttachEngine(),
    VllmEngine.name: lambda s: VllmEngine(s),
}


def get_engine(name: str, settings: Settings | None = None) -> Engine:
    """The engine a pack names, or a UsageError listing the known ones."""
    factory = ENGINES.get(name)
    if factory is None:
        raise UsageError(f"engine.name {name!r} is not a known engine; choose one of {sorted(ENGINES)}")
    return factory(settings or Settings.load())
