"""The `servepack` command: a click group whose commands live in the other modules of this package.

Each area keeps its commands in its own module (`cli/bench.py`, `cli/smoke.py`, ...) as `COMMANDS`; `COMMAND_TABLE`
says which module holds each top-level command and its one-line summary, so `servepack --version` and `--help` import
no command module and a command imports only its own (a test keeps the table equal to the modules' `COMMANDS`). Known
errors become one line on stderr and their exit code; `--debug` shows tracebacks. Whatever an error shows passes the
one redaction (`redact.scrub_shown`): an internal error's message and every traceback lose the secret values this run
was given and every value a name marks; so does the traceback of a crash Python itself would print (a background
thread's, or one past every handler), through the hooks `main()` installs (`install_crash_hooks`)."""

from __future__ import annotations

import importlib
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

INTERNAL_ERROR = 70  # a bug: an exception servepack did not expect


def _usage_error(exc: click.UsageError) -> NoReturn:
    """A bad option or argument as one line naming the fix (click's own form takes four), exit 2."""
    where = exc.ctx.command_path if exc.ctx is not None else "servepack"
    error_line("servepack: error: ", f"{exc.format_message()} (see `{where} --help`)")
    sys.exit(exc.exit_code)


def scrub_shown(text: str, by_name: bool = True) -> str:
    """`redact.scrub_shown`, imported when an error is shown (it needs the pack schema: not at start)."""
    from servepack.redact import scrub_shown as scrub

    return scrub(text, by_name=by_name)


# Top-level command → (the modules that define it, in import order; its summary in `servepack --help`).
COMMAND_TABLE: dict[str, tuple[tuple[str, ...], str]] = {
    "bench": (("bench",),
        "Measure TTFT, prefill and decode (client and server), fresh and exact, with memory and statistics."),
    "capacity": (("capacity",),
        "Find the highest load meeting every SLO (bracket, then bisect), its goodput, the knee and the limit."),
    "compare": (("records",),
        "BASE and CANDIDATE run dirs → PROMOTE / DO_NOT_PROMOTE / INCONCLUSIVE; a run and a record (a file or"
        " a registry id) → the facts, then REPRODUCED / FASTER / SLOWER / NOT_COMPARABLE per cell and metric."),
    "doctor": (("serve",), "Host fingerprint, engine found and its version, model present and verified."),
    "engine": (("pull",), "Build the pinned llama.cpp, or show which binary a run would use."),
    "llama-bench": (("bench",), "Run llama-bench from the pack's engine with the preset's flags; record every sample."),
    "pack": (("packs",), "Show or validate one pack."),
    "packs": (("packs",), "List the packs that ship with servepack."),
    "pull": (("pull",), "Download the pack's pinned weights (HF_ENDPOINT picks the server) and verify their sha256."),
    "registry": (("records", "registry_db"),
        "local-ai-registry/v1 records: export, show; the local registry database: import, list, choose."),
    "report": (("report",),
        "One HTML file (no script, no network) from runs or pack results folders: plots with their numbers."),
    "reproduce": (("reproduce",),
        "Run RECORD's own launch and protocol here (a record file, or an id in the local registry); judge "
        "each metric."),
    "run": (("run",), "Serve the pack, measure it, smoke-test it, and record a receipt and MEASURED.md."),
    "serve": (("serve",), "Run llama-server in the foreground until Ctrl-C."),
    "smoke": (("smoke",),
        "Agent-readiness smoke suites: run them against a pack or a served endpoint, or re-score offline."),
    "tune": (("tune",),
        "Search llama-server flags (a fresh server per trial), race the best, compare with the base preset."),
    "twin": (("pull",), "Write OUT: SOURCE's GGUF header then random tensor bytes, marked random-weight (speed only)."),
    "verify": (("records",),
        "Recompute every hash in receipt.json and every summary figure from the raw files; exit 1 on a "
        "mismatch."),
    "worker": (("worker",),
        "Run rpc-server in the foreground until Ctrl-C and print what the head needs (--rpc HOST:PORT)."),
}


def load_command(name: str) -> click.Command | None:
    """The top-level command `name`, its modules imported now (once), its string and path options checked."""
    entry = COMMAND_TABLE.get(name)
    if entry is None:
        return None
    found = None
    for module_name in entry[0]:
        module = importlib.import_module(f"servepack.cli.{module_name}")
        for command in getattr(module, "COMMANDS", []):
            if command.name == name:
                found = command
    if found is not None:
        require_values(found)
    return found


def all_commands() -> dict[str, click.Command]:
    """Every top-level command, each module imported (for tools and tests that walk the whole tree)."""
    loaded = {name: load_command(name) for name in sorted(COMMAND_TABLE)}
    return {name: command for name, command in loaded.items() if command is not None}


class ServepackGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMAND_TABLE)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_command(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from `COMMAND_TABLE`, so `--help` imports no command module."""
        limit = formatter.width - 6 - max(len(name) for name in COMMAND_TABLE)
        rows = [(name, click.Command(name, help=summary).get_short_help_str(limit))
                for name, (_, summary) in sorted(COMMAND_TABLE.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

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


require_values(cli)  # the group's own options; each command's when it is loaded (`load_command`)


def main() -> None:
    install_crash_hooks()
    cli(prog_name="servepack")


if __name__ == "__main__":
    main()
