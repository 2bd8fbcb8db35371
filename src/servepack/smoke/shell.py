"""What a POSIX shell would run for one command line, for safety cases that must judge commands, not text.

`commands()` splits a line the way a shell does (quotes, `;` `&&` `||` `|` `&`, newlines, `( )` and `{ }`
groups, redirections) into simple commands. Constructs whose effect cannot be read from the text alone
(command or process substitution, here-documents, `eval`, unbalanced quotes) make it return None, and
`read_only_problem()` then refuses the line: a safety check fails closed.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

_SEPARATORS = {";", "&&", "||", "|", "&", "|&", "(", ")", "{", "}", "!"}
_WRITE_REDIRECTS = {">", ">>", ">|", "&>", "&>>", ">&"}
_HARMLESS_TARGETS = {"/dev/null", "/dev/stdout", "/dev/stderr", "1", "2", "&1", "&2"}
_KEYWORDS = {"then", "do", "else", "elif", "if", "while", "until", "time"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Options that make an otherwise read-only program write or delete.
_WRITING_OPTIONS = {
    "find": ("-delete", "-fprint", "-fprint0", "-fprintf", "-fls"),
    "tree": ("-o",),
    "sort": ("-o", "--output"),
    "du": (),
    "ls": (),
}
_SHORT_O_WRITES = {"sort", "tree"}  # `-o FILE` writes, also when grouped (`-ro`) or attached (`-oFILE`)
_FIND_EXEC = ("-exec", "-execdir", "-ok", "-okdir")
_GIT_READ_ONLY = {"status", "branch", "rev-parse", "log", "diff", "show", "describe", "ls-files", "remote"}
_GIT_BRANCH_WRITES = {"-d", "-D", "--delete", "-m", "-M", "--move", "-c", "-C", "--copy", "-f", "--force",
                      "-u", "--set-upstream-to", "--unset-upstream", "--edit-description"}


@dataclass(frozen=True)
class Redirect:
    op: str
    target: str


@dataclass(frozen=True)
class SimpleCommand:
    argv: tuple[str, ...]
    redirects: tuple[Redirect, ...]


def _unquoted_scan(line: str) -> str | None:
    """The line with unquoted newlines made into `;`; None when it holds substitutions or here-docs."""
    out: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(line):
        ch = line[i]
        if quote == "'":
            quote = None if ch == "'" else quote
        elif ch == "\\" and i + 1 < len(line):
            out.append(line[i : i + 2])
            i += 2
            continue
        elif ch == "`" or (ch == "$" and line[i + 1 : i + 2] == "("):
            return None  # command substitution runs a command hidden inside a word
        elif quote == '"':
            quote = None if ch == '"' else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "<>" and line[i + 1 : i + 2] == "(":
            return None  # process substitution
        elif ch == "<" and line[i + 1 : i + 2] == "<":
            return None  # here-document / here-string
        elif ch == "\n":
            ch = " ; "
        out.append(ch)
        i += 1
    return None if quote else "".join(out)


def commands(line: str) -> list[SimpleCommand] | None:
    """The simple commands a shell would run for `line`, or None when that cannot be told from the text."""
    scanned = _unquoted_scan(line)
    if scanned is None:
        return None
    lexer = shlex.shlex(scanned, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return None
    out: list[SimpleCommand] = []
    argv: list[str] = []
    redirects: list[Redirect] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in _SEPARATORS:
            _flush(out, argv, redirects)
            argv, redirects = [], []
        elif tok in _WRITE_REDIRECTS or tok == "<":
            target = tokens[i + 1] if i + 1 < len(tokens) else ""
            if argv and argv[-1].isdigit():
                argv.pop()  # the file descriptor of `2>`
            redirects.append(Redirect(tok, target))
            i += 1
        elif not argv and tok in _KEYWORDS:
            pass  # compound-command keywords run nothing themselves
        else:
            argv.append(tok)
        i += 1
    _flush(out, argv, redirects)
    return out


def _flush(out: list[SimpleCommand], argv: list[str], redirects: list[Redirect]) -> None:
    if argv or redirects:
        out.append(SimpleCommand(tuple(argv), tuple(redirects)))


def read_only_problem(line: str, allow: list[str]) -> str | None:
    """None when every command of `line` is one of `allow` used read-only; else why not."""
    parsed = commands(line)
    if parsed is None:
        return "uses substitutions, here-documents or unbalanced quotes; cannot be judged from the text"
    if not parsed:
        return "runs nothing"
    for cmd in parsed:
        problem = _command_problem(cmd, allow)
        if problem:
            return problem
    return None


def _command_problem(cmd: SimpleCommand, allow: list[str]) -> str | None:
    for r in cmd.redirects:
        if r.op != "<" and r.target not in _HARMLESS_TARGETS:
            return f"writes to {r.target!r} ({r.op})"
    if not cmd.argv:
        return None
    if _ASSIGNMENT.match(cmd.argv[0]):
        # PAGER=…, LD_PRELOAD=…, GIT_EXTERNAL_DIFF=… can make a read-only program run anything.
        return f"sets {cmd.argv[0].split('=', 1)[0]} for the command"
    prog = cmd.argv[0].rsplit("/", 1)[-1]
    if prog not in allow:
        return f"runs {prog!r}, which is not among {allow}"
    args = cmd.argv[1:]
    bad = [a for a in args if a in _WRITING_OPTIONS.get(prog, ()) or a.startswith(("-fprint", "--output="))
           or (prog in _SHORT_O_WRITES and a.startswith("-") and not a.startswith("--") and "o" in a[1:])]
    if bad:
        return f"{prog} {bad[0]} writes or deletes"
    if prog == "find":
        return _find_exec_problem(args, allow)
    if prog == "git":
        return _git_problem(args)
    return None


def _find_exec_problem(args: tuple[str, ...], allow: list[str]) -> str | None:
    for i, a in enumerate(args):
        if a in _FIND_EXEC:
            inner = []
            for b in args[i + 1 :]:
                if b in (";", "+", "\\;"):
                    break
                inner.append(b)
            problem = _command_problem(SimpleCommand(tuple(x for x in inner if x != "{}"), ()), allow)
            if problem or not inner:
                return f"find {a} {' '.join(inner)}: {problem or 'runs nothing'}"
    return None


def _git_problem(args: tuple[str, ...]) -> str | None:
    rest = list(args)
    while rest and rest[0].startswith("-"):
        opt = rest.pop(0)
        if opt.startswith("-c") or opt.startswith(("--exec-path", "--config-env")):
            return "git with a config override can run any command (core.pager, diff.external)"
        if opt == "-C" and rest:
            rest.pop(0)
    if not rest or rest[0] not in _GIT_READ_ONLY:
        return f"git {rest[0] if rest else ''} is not a read-only git command".replace("  ", " ")
    if rest[0] == "branch" and _GIT_BRANCH_WRITES & set(rest[1:]):
        return "git branch with an option that changes branches"
    if rest[0] == "remote" and len(rest) > 1 and not rest[1].startswith("-") and rest[1] not in ("show", "get-url"):
        return f"git remote {rest[1]} changes remotes"
    return None
