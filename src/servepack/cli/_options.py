"""Options shared by several commands: those that resolve a model (run, bench, smoke, serve), the server and model
to launch instead of the pins (bench, capacity, tune), the registry's --db, the results directory's --out."""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from servepack.errors import UsageError
from servepack.packs.flag_policy import FAMILIES, OPT_IN, allowing
from servepack.settings import HOUR_S, DurationError, duration_range, parse_duration

F = TypeVar("F", bound=Callable[..., Any])
NAME_MAX, PATH_MAX = 255, 4096  # bytes of one name and of a whole path (Linux's limits; longer is ENAMETOOLONG)
VERIFY_ENV = "SERVEPACK_VERIFY_MODEL"
# Upper bounds of numeric options that have no pack field behind them (the rest use packs.schema's).
MAX_SEED = 2**32 - 1
MAX_TIMEOUT_S = 86_400.0  # a day


def _export_verify(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    """--verify-model reaches the model resolver through Settings (SERVEPACK_VERIFY_MODEL), for this command only."""
    if value and os.environ.get(VERIFY_ENV) != "1":
        previous = os.environ.get(VERIFY_ENV)
        os.environ[VERIFY_ENV] = "1"

        def restore() -> None:
            if previous is None:
                os.environ.pop(VERIFY_ENV, None)
            else:
                os.environ[VERIFY_ENV] = previous

        ctx.call_on_close(restore)
    return value


def verify_model_option(f: F) -> F:
    """`--verify-model`: read and hash the model's bytes again even when the file is unchanged since last hashed."""
    return click.option(
        "--verify-model", is_flag=True, expose_value=False, callback=_export_verify,
        help="Re-hash the model file now, even when it is unchanged since it was last hashed (a claim always does).",
    )(f)


class FiniteFloat(click.FloatRange):
    """A float in range that is also finite: `nan` and `inf` compare false with every bound and would pass."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number!r} is not a finite number.", param, ctx)
        return number


class Duration(click.ParamType):  # type: ignore[type-arg]
    """A duration in the one grammar (`settings.parse_duration`: 60s, 2m, 90, 0; seconds unless suffixed) within
    `range_text` (0 to 1 hour unless told): what the help states is what the check takes."""

    name = "duration"

    def __init__(self, most_s: float = HOUR_S, *, positive: bool = False) -> None:
        self.most_s, self.positive = most_s, positive
        self.range_text = duration_range(most_s, positive=positive)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        try:
            return parse_duration(str(value), most_s=self.most_s, positive=self.positive)
        except DurationError as exc:
            self.fail(str(exc), param, ctx)


def db_option(f: F) -> F:
    """`--db PATH`: the registry database (default: registry.sqlite3 under servepack's cache directory)."""
    return click.option(
        "--db", "db", type=click.Path(dir_okay=False, path_type=Path), default=None,
        help="Registry database file (default: registry.sqlite3 in the cache dir, SERVEPACK_CACHE_DIR).",
    )(f)


def out_option(f: F) -> F:
    """`--out DIR`: the results directory a command makes; its rule is `store.check_new_out` (a new folder or an
    empty one, never a file, a link or a folder holding anything)."""
    return click.option("--out", type=click.Path(path_type=Path),
                        help="Results directory: a new folder, or an empty one (default: a new one under "
                             "SERVEPACK_RESULTS_DIR, results/).")(f)


def server_model_options(f: F) -> F:
    """`--server-bin PATH` and `--model-file PATH`: a llama-server and a GGUF (a twin) to launch instead of the
    pack's pins (bench, capacity, tune)."""
    f = click.option("--model-file", type=click.Path(path_type=Path),
                     help="GGUF to serve instead of the pin (a twin).")(f)
    return click.option("--server-bin", type=click.Path(path_type=Path),
                        help="llama-server to launch instead of the pin.")(f)


def _allow_server_flags(ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """--allow-server-flag reaches the session, the tune space and the engine's launch for this command only."""
    try:
        ctx.with_resource(allowing(value))
    except UsageError as exc:
        raise click.BadParameter(str(exc).removeprefix(f"{OPT_IN} ")) from None
    return value


def allow_server_flag_option(f: F) -> F:
    """`--allow-server-flag FAMILY` (repeatable): let presets, spaces and records pass flags of that family."""
    return click.option(
        OPT_IN, "allow_server_flags", multiple=True, metavar="FAMILY", expose_value=False,
        callback=_allow_server_flags,
        help=f"Let the server take flags that reach this host ({', '.join(FAMILIES)}); refused without it. "
             "Repeatable; recorded in the receipt.",
    )(f)


def _given(value: Any, param: click.Parameter | None, ctx: click.Context | None, kind: click.ParamType[Any]) -> None:
    """A value given on the command line that no command can use: an empty one (`--out ""` meant the current
    directory, `PACK ""` the default pack, `--db ""` an internal error), one holding a NUL byte (an internal error
    wherever it reached the filesystem), or a path no filesystem takes."""
    if not isinstance(value, str):
        return
    if value == "":
        kind.fail("an empty value; give one, or leave the option out", param, ctx)
    if "\0" in value:  # no path, name or number holds one (an exec'd argv cannot; a caller of the CLI can)
        kind.fail("holds a NUL byte; give the value without it", param, ctx)
    if isinstance(kind, click.Path):
        raw = os.fsencode(value)
        if len(raw) >= PATH_MAX or any(len(name) > NAME_MAX for name in raw.split(b"/")):
            kind.fail(f"a path longer than a filesystem takes ({NAME_MAX} bytes a name, {PATH_MAX - 1:,} in all)",
                      param, ctx)


_GIVEN_TYPES: dict[type[click.ParamType[Any]], type[click.ParamType[Any]]] = {}


def _given_type(kind: click.ParamType[Any]) -> click.ParamType[Any]:
    """`kind` (a string or path type) that refuses, before its own checks, what `_given` refuses."""
    base = type(kind)
    if base not in _GIVEN_TYPES:
        def convert(self: click.ParamType[Any], value: Any, param: click.Parameter | None,
                    ctx: click.Context | None) -> Any:
            _given(value, param, ctx, self)
            return super(_GIVEN_TYPES[base], self).convert(value, param, ctx)  # type: ignore[misc]
        _GIVEN_TYPES[base] = type(f"Given{base.__name__}", (base,), {"convert": convert})
    given = copy.copy(kind)
    given.__class__ = _GIVEN_TYPES[base]
    return given


def require_values(command: click.Command) -> None:
    """Every string and path parameter of `command` (and of its subcommands) refuses an empty value and an
    over-long path: one usage line, exit 2, before the command runs. The one place this is checked."""
    for sub in command.commands.values() if isinstance(command, click.Group) else ():
        require_values(sub)
    for param in command.params:
        kind = param.type
        if isinstance(kind, click.types.StringParamType | click.Path) and type(kind) not in _GIVEN_TYPES.values():
            param.type = _given_type(kind)
