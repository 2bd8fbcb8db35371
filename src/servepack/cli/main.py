"""The `servepack` command: a click group that gathers `COMMANDS` from every module of this package.

Each area keeps its commands in its own module (`cli/bench.py`, `cli/smoke.py`, ...), so adding a command
group never edits this file. Known errors become one line on stderr and their exit code; `--debug` shows
tracebacks. Whatever an error shows passes the one redaction (`redact.scrub_shown`): an internal error's
message and every traceback lose the secret values this run was given and every value a name marks; so does the
traceback of a crash Python itself would print (a background thread's, or one past every handler), through the hooks
`main()` installs (`install_crash_hooks`).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import threading
import traceback
from types import TracebackType
from typing import Any, NoReturn

import click

from servepack import __version__
from servepack.cli._options import require_values
from servepack.cli.render import echo_block, error_line
from servepack.errors import ServepackError
from servepack.redact import scrub_shown

INTERNAL_ERROR = 70  # a bug: an exception servepack did not expect


def _usage_error(exc: click.UsageError) -> NoReturn:
    """A bad option or argument as one line naming the fix (click's own form takes four), exit 2."""
    where = exc.ctx.command_path if exc.ctx is not None else "servepack"
    error_line("servepack: error: ", f"{exc.format_message()} (see `{where} --help`)")
    sys.exit(exc.exit_code)


class ServepackGroup(click.Group):
    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            _usage_error(exc)

    def invoke(self, ctx: click.Context) -> Any:
        def debug() -> bool:  # set by the group's callback, so read only once something went wrong
            return bool(ctx.obj and ctx.obj.get("debug"))

        try:
            return super().invoke(ctx)
        except ServepackError as exc:
            if debug():
                _traceback(exc, exc.exit_code)
            error_line("servepack: error: ", scrub_shown(str(exc), by_name=False))
            sys.exit(exc.exit_code)
        except (KeyboardInterrupt, click.exceptions.Abort):
            # Whatever was measured is kept and the receipt written by the session's own unwinding.
            error_line("servepack: ", "interrupted")
            sys.exit(130)
        except click.UsageError as exc:
            if debug():
                _traceback(exc, exc.exit_code)
            _usage_error(exc)
        except (click.exceptions.ClickException, click.exceptions.Exit, SystemExit):
            raise
        except Exception as exc:
            if debug():
                _traceback(exc, INTERNAL_ERROR)
            error_line("servepack: internal error: ", scrub_shown(f"{type(exc).__name__}: {exc}") + " (a bug: run "
                       "again with `servepack --debug …` for the traceback and report it)")
            sys.exit(INTERNAL_ERROR)


def _traceback(exc: BaseException, code: int) -> NoReturn:
    """`--debug`: the traceback on stderr, its secrets removed as from every error shown (`redact.scrub_shown`: the
    values this run registered, and every value a name marks), then exit `code`."""
    echo_block(scrub_shown("".join(traceback.format_exception(exc)).rstrip("\n")), err=True)
    sys.exit(code)


def _show_crash(head: str, exc_type: type[BaseException], exc: BaseException | None,
                tb: TracebackType | None) -> None:
    """A crash Python would print itself, as it would (`head`, then the traceback) but through `scrub_shown`; with no
    stderr there is nowhere to print, and click's echo (under `cli.render`) prints nothing, as Python's own hooks."""
    text = "".join(traceback.format_exception(exc_type, exc, tb)).rstrip("\n")
    echo_block(scrub_shown(f"{head}{text}"), err=True)


def _thread_crash(args: threading.ExceptHookArgs) -> None:
    """`threading.excepthook`: a background thread's uncaught exception, its thread named as Python names it."""
    if args.exc_type is SystemExit:  # a thread that exits says nothing (Python's own hook)
        return
    name = args.thread.name if args.thread is not None else threading.get_ident()
    _show_crash(f"Exception in thread {name}:\n", args.exc_type, args.exc_value, args.exc_traceback)


def _uncaught(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """`sys.excepthook`: an exception past every handler of the command (the group's catch them all; this is the
    last resort)."""
    _show_crash("", exc_type, exc, tb)


def install_crash_hooks() -> None:
    """Route the tracebacks Python prints itself (a thread's crash, an exception nothing caught) through the one
    redaction, as every error servepack shows. In this process only: `main()` calls it before the command runs."""
    threading.excepthook = _thread_crash
    sys.excepthook = _uncaught


@click.group(cls=ServepackGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="servepack")
@click.option("--debug", is_flag=True, help="Show tracebacks for every error.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Pin a model, an engine build and a hardware target; turn it into evidence."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _register_all() -> None:
    package = importlib.import_module("servepack.cli")
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name in {"main", "render"} or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"servepack.cli.{info.name}")
        for command in getattr(module, "COMMANDS", []):
            cli.add_command(command)
    require_values(cli)  # once every command (and subcommand) is attached


_register_all()


def main() -> None:
    install_crash_hooks()
    cli(prog_name="servepack")


if __name__ == "__main__":
    main()
