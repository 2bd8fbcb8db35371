"""The sandboxed world a Layer B episode acts on: a temp workspace, a scripted web and browser, memory, cron."""

from __future__ import annotations

import fnmatch
import re
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from servepack.smoke.layer_b.cases import CronJob, Page, WorldSpec
from servepack.smoke.sandbox.rootfs import OutsideRoot, RootFS

T = TypeVar("T")
MAX_READ_CHARS = 12_000
MAX_FILE_BYTES = 8 * 1024 * 1024
_CRON_FIELD = re.compile(r"^(\*|\d+(-\d+)?)(/\d+)?(,(\*|\d+(-\d+)?)(/\d+)?)*$")
_CRON_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))


class ToolError(Exception):
    """A tool failed the way a real one would; the message goes back to the model."""


@dataclass(frozen=True)
class Event:
    """One executed tool call, as the judge sees it."""

    step: int
    name: str
    arguments: dict[str, Any]
    ok: bool
    flags: tuple[str, ...] = ()
    detail: str = ""


@dataclass
class Submission:
    form: str
    fields: dict[str, str]


@dataclass
class World:
    """Mutable state of one episode; `workspace` is a fresh temp directory removed by `close()`."""

    workspace: Path
    pages: dict[str, Page]
    memory: list[str]
    cron: list[CronJob]
    shell_allowed: tuple[str, ...] | None
    events: list[Event] = field(default_factory=list)
    visited: set[str] = field(default_factory=set)
    current_url: str | None = None
    inputs: dict[str, str] = field(default_factory=dict)
    submissions: list[Submission] = field(default_factory=list)
    _next_job: int = 1

    @classmethod
    def create(cls, spec: WorldSpec, *, default_shell: tuple[str, ...] | None = None) -> World:
        workspace = Path(tempfile.mkdtemp(prefix="servepack-layer-b-"))
        fs = RootFS(workspace)
        for rel, text in spec.files.items():
            fs.write_bytes(rel, text.encode("utf-8"))
        allowed = tuple(spec.shell_allowed) if spec.shell_allowed is not None else default_shell
        world = cls(workspace, {p.url: p for p in spec.pages}, list(spec.memory), list(spec.cron), allowed)
        world._next_job = len(spec.cron) + 1
        return world

    def close(self) -> None:
        shutil.rmtree(self.workspace, ignore_errors=True)

    @property
    def fs(self) -> RootFS:
        """The workspace, through which every host-side read and write goes (no link out is followed)."""
        return RootFS(self.workspace)

    def _guard(self, path: str, op: Callable[[], T]) -> T:
        """op() with filesystem failures turned into the ToolError a model gets back."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError("path must be a non-empty string")
        try:
            return op()
        except OutsideRoot:
            raise ToolError(f"{path}: outside the workspace; use paths relative to the workspace "
                            "(links out of it are not followed)") from None  # fmt: skip
        except IsADirectoryError:
            raise ToolError(f"{path}: is a directory") from None
        except (FileNotFoundError, NotADirectoryError):
            raise ToolError(f"{path}: no such file") from None
        except OSError as exc:
            raise ToolError(f"{path}: {exc.strerror or exc}") from None

    def _read_text(self, path: str, limit: int = MAX_FILE_BYTES) -> str:
        data = self._guard(path, lambda: self.fs.read_bytes(path, limit))
        return data.decode("utf-8", errors="replace")

    def exists(self, path: str) -> bool:
        """Whether an entry (file, directory or link, even one pointing out) is at `path`."""
        try:
            return self.fs.lstat(path, follow_last=False) is not None
        except OutsideRoot:
            return True  # the path runs through a link out of the workspace: something is there
        except OSError:
            return False

    def file_text(self, path: str) -> str:
        """The text of the regular file at `path`; ToolError (why) when there is none to read."""
        return self._read_text(path)

    def read_file(self, path: str, offset: int = 1, limit: int | None = None) -> str:
        lines = self._read_text(path).splitlines(keepends=True)
        start = max(offset, 1) - 1
        chosen = lines[start : start + limit if limit else None]
        return "".join(chosen)[:MAX_READ_CHARS]

    def write_file(self, path: str, content: str) -> str:
        rel = self._guard(path, lambda: self.fs.write_bytes(path, content.encode("utf-8")))
        return f"wrote {len(content.encode())} bytes to {rel}"

    def patch(self, path: str, old_string: str, new_string: str, replace_all: bool = False) -> str:
        data = self._guard(path, lambda: self.fs.read_bytes(path, MAX_FILE_BYTES))
        text = data.decode("utf-8")
        count = text.count(old_string) if old_string else 0
        if count == 0:
            raise ToolError(f"{path}: old_string not found; read the file and copy the text exactly")
        if count > 1 and not replace_all:
            raise ToolError(f"{path}: old_string occurs {count} times; add context or set replace_all")
        text = text.replace(old_string, new_string) if replace_all else text.replace(old_string, new_string, 1)
        rel = self._guard(path, lambda: self.fs.write_bytes(path, text.encode("utf-8")))
        return f"patched {rel}: {count if replace_all else 1} replacement(s)"

    def regular_files(self, path: str = ".") -> list[str]:
        """Workspace-relative paths of the regular files at or under `path`; links are never entered."""
        st = self._guard(path, lambda: self.fs.lstat(path))
        if st is None:
            raise ToolError(f"{path}: no such file or directory")
        if stat.S_ISREG(st.st_mode):
            parent, name = self.fs.locate(path)
            return ["/".join([*parent, name or ""])]
        return [rel for rel, entry, _ in self._guard(path, lambda: list(self.fs.walk(path)))
                if stat.S_ISREG(entry.st_mode)]  # fmt: skip

    def search_files(self, pattern: str, path: str = ".", target: str = "content") -> str:
        files = self.regular_files(path)
        if target == "files":
            names = [(rel, rel.rsplit("/", 1)[-1]) for rel in files]
            hits = [rel for rel, name in names if fnmatch.fnmatch(name, pattern) or pattern in name]
            return "\n".join(hits) or "no matching files"
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ToolError(f"pattern is not a valid regular expression: {exc}") from None
        out = []
        for rel in files:
            text = self.fs.read_entry(rel, MAX_FILE_BYTES).decode("utf-8", errors="replace")
            for n, line in enumerate(text.splitlines(), 1):
                if regex.search(line):
                    out.append(f"{rel}:{n}:{line}")
        return "\n".join(out[:200]) or "no matches"

    def web_search(self, query: str) -> list[dict[str, str]]:
        terms = {t for t in re.findall(r"[a-z0-9]+", query.lower()) if len(t) > 1}
        scored = []
        for page in self.pages.values():
            words = set(re.findall(r"[a-z0-9]+", f"{page.title} {page.content}".lower()))
            score = len(terms & words)
            if score:
                scored.append((-score, page.url, page))
        return [{"url": p.url, "title": p.title, "snippet": p.content[:160]} for _, _, p in sorted(scored)[:5]]

    def page(self, url: str) -> Page:
        page = self.pages.get(url.strip()) or self.pages.get(url.strip().rstrip("/"))
        if page is None:
            raise ToolError(f"{url}: 404 not found")
        self.visited.add(page.url)
        return page

    def navigate(self, url: str) -> str:
        page = self.page(url)
        self.current_url = page.url
        return self.snapshot()

    def snapshot(self) -> str:
        if self.current_url is None:
            raise ToolError("no page is open; call browser_navigate first")
        page = self.pages[self.current_url]
        lines = [f"URL: {page.url}", f"Title: {page.title}", "", page.content, "", "Interactive elements:"]
        for el in page.elements:
            value = f" value={self.inputs[el.ref]!r}" if el.ref in self.inputs else ""
            lines.append(f"[{el.ref}] {el.kind} {el.label!r}{value}")
        return "\n".join(lines)

    def _element(self, ref: str) -> Any:
        if self.current_url is None:
            raise ToolError("no page is open; call browser_navigate first")
        for el in self.pages[self.current_url].elements:
            if el.ref == ref.strip().strip("[]@"):
                return el
        raise ToolError(f"no element {ref!r} on {self.current_url}; use a ref from the snapshot")

    def click(self, ref: str) -> str:
        el = self._element(ref)
        if el.kind == "input":
            return f"focused {el.ref}"
        if el.kind == "button" and el.form:
            page = self.pages[self.current_url or ""]
            inputs = [i for i in page.elements if i.form == el.form and i.kind == "input"]
            fields = {i.name or i.ref: self.inputs.get(i.ref, "") for i in inputs}
            self.submissions.append(Submission(el.form, fields))
        if el.href:
            return self.navigate(el.href)
        return f"clicked {el.ref}\n\n{self.snapshot()}"

    def type_text(self, ref: str, text: str) -> str:
        el = self._element(ref)
        if el.kind != "input":
            raise ToolError(f"{el.ref} is a {el.kind}, not an input")
        self.inputs[el.ref] = text
        return f"typed into {el.ref} ({el.label})"

    def memory_op(self, action: str, content: str | None, old_text: str | None) -> str:
        if action == "add":
            if not content:
                raise ToolError("memory add needs content")
            self.memory.append(content)
        elif action in ("replace", "remove"):
            if not old_text:
                raise ToolError(f"memory {action} needs old_text identifying the entry")
            hits = [i for i, e in enumerate(self.memory) if old_text in e]
            if len(hits) != 1:
                raise ToolError(f"old_text matches {len(hits)} entries; it must match exactly one")
            if action == "remove":
                del self.memory[hits[0]]
            elif not content:
                raise ToolError("memory replace needs content")
            else:
                self.memory[hits[0]] = content
        elif action != "list":
            raise ToolError(f"unknown memory action {action!r}")
        return "memory entries:\n" + ("\n".join(f"- {e}" for e in self.memory) or "(empty)")

    def cron_op(
        self, action: str, schedule: str | None, prompt: str | None, name: str | None, job_id: str | None
    ) -> str:
        if action == "create":
            if not schedule or not prompt:
                raise ToolError("cronjob create needs schedule and prompt")
            check_cron(schedule)
            job = CronJob(id=f"job-{self._next_job}", schedule=" ".join(schedule.split()), prompt=prompt, name=name)
            self._next_job += 1
            self.cron.append(job)
            return f"created {job.id}: {job.schedule} {job.prompt!r}"
        if action == "remove":
            keep = [j for j in self.cron if j.id != job_id]
            if len(keep) == len(self.cron):
                raise ToolError(f"no cron job {job_id!r}; list the jobs to see their ids")
            self.cron = keep
            return f"removed {job_id}"
        if action == "list":
            return "\n".join(f"{j.id}: {j.schedule} {j.prompt!r}" for j in self.cron) or "no cron jobs"
        raise ToolError(f"unknown cronjob action {action!r}")


def check_cron(schedule: str) -> None:
    """Raise ToolError unless `schedule` is a valid 5-field cron expression."""
    parts = schedule.split()
    if len(parts) != 5:
        raise ToolError(f"schedule {schedule!r} must have 5 fields: minute hour day-of-month month day-of-week")
    for part, (lo, hi) in zip(parts, _CRON_RANGES, strict=True):
        if not _CRON_FIELD.match(part):
            raise ToolError(f"schedule field {part!r} is not valid cron syntax")
        for number in re.findall(r"\d+", re.sub(r"/\d+", "", part)):
            if not lo <= int(number) <= hi:
                raise ToolError(f"schedule field {part!r} is out of range {lo}-{hi}")
