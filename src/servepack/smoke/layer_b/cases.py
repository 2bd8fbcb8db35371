"""Layer B case schema (initial world, expected end state, golden script) and the loader of the shipped cases."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from servepack.errors import UsageError
from servepack.safepath import check_relative_path
from servepack.strict import Strict

SUITE = "layer_b"
SUITE_VERSION = "3"
CATEGORIES = (
    "files", "terminal", "web", "browser", "memory_cron", "multi_step", "error_recovery", "safety",
)  # fmt: skip


class Element(Strict):
    """One interactive element of a scripted page, addressed by `ref` in browser_click / browser_type."""

    ref: str
    kind: Literal["link", "button", "input"]
    label: str
    href: str | None = Field(None, description="link target, or where a button leads after submitting")
    form: str | None = Field(None, description="form a button submits, or an input belongs to")
    name: str | None = Field(None, description="field name of an input")


class Page(Strict):
    """A canned web page: found by web_search, read by web_extract, shown by browser_navigate."""

    url: str
    title: str
    content: str
    elements: list[Element] = Field(default_factory=list)


class CronJob(Strict):
    id: str
    schedule: str
    prompt: str
    name: str | None = None


class WorldSpec(Strict):
    """The world an episode starts in."""

    files: dict[str, str] = Field(default_factory=dict, description="workspace-relative path → text")
    pages: list[Page] = Field(default_factory=list)
    memory: list[str] = Field(default_factory=list)
    cron: list[CronJob] = Field(default_factory=list)
    shell_allowed: list[str] | None = Field(None, description="terminal allow-list; None = the default list")

    @model_validator(mode="after")
    def _plain_paths(self) -> WorldSpec:
        for rel in self.files:
            check_relative_path(rel)
        return self


class FileExpect(Strict):
    path: str

    @model_validator(mode="after")
    def _plain(self) -> FileExpect:
        check_relative_path(self.path)
        return self
    exists: bool = True
    equals: str | None = None
    contains: list[str] = Field(default_factory=list)
    regex: str | None = Field(None, description="re.search with re.S over the whole file")
    not_contains: list[str] = Field(default_factory=list)


class CronExpect(Strict):
    schedule: str | None = Field(None, description="exact 5-field schedule, whitespace-normalised")
    prompt_regex: str | None = None


class SubmissionExpect(Strict):
    form: str
    fields: dict[str, str] = Field(description="field name → regex (case-insensitive) on the submitted value")


class Expect(Strict):
    """The judged end state and final answer. Regexes are case-insensitive unless stated."""

    files: list[FileExpect] = Field(default_factory=list)
    memory: list[str] = Field(default_factory=list, description="regexes each matched by some memory entry")
    memory_absent: list[str] = Field(default_factory=list, description="regexes no memory entry may match")
    cron: list[CronExpect] = Field(default_factory=list)
    cron_count: int | None = None
    submissions: list[SubmissionExpect] = Field(default_factory=list)
    visited: list[str] = Field(default_factory=list, description="URLs read or opened at least once")
    tools_used: list[str] = Field(default_factory=list)
    tools_not_used: list[str] = Field(default_factory=list)
    final_regex: str | None = None
    final_not_regex: str | None = None
    allow_destructive: bool = False


class GoldenCall(Strict):
    name: str
    arguments: dict[str, Any]


class GoldenTurn(Strict):
    """One assistant message of the golden script: tool calls, or the final text answer."""

    content: str | None = None
    tool_calls: list[GoldenCall] = Field(default_factory=list)


class LayerBCase(Strict):
    id: str = Field(pattern=r"^[a-z0-9_]+$")
    suite: Literal["layer_b"]
    category: str
    version: Literal["3"]
    rationale: str = Field(min_length=10, description="one line: which failure this case catches")
    tools: list[str] = Field(min_length=1, description="names from the Layer B tool registry")
    world: WorldSpec = Field(default_factory=WorldSpec)
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_steps: int = Field(6, ge=1, le=20)
    expect: Expect
    golden: list[GoldenTurn] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> LayerBCase:
        if self.category not in CATEGORIES:
            raise ValueError(f"category {self.category!r} is not one of {', '.join(CATEGORIES)}")
        if "\n" in self.rationale:
            raise ValueError("rationale must be one line")
        if len(self.golden) > self.max_steps:
            raise ValueError(f"golden script has {len(self.golden)} turns, more than max_steps {self.max_steps}")
        if self.golden[-1].tool_calls or not self.golden[-1].content:
            raise ValueError("the golden script must end with a text answer")
        for turn in self.golden:
            unknown = [c.name for c in turn.tool_calls if c.name not in self.tools]
            if unknown:
                raise ValueError(f"golden calls tools not offered by the case: {unknown}")
        for pattern in filter(None, [self.expect.final_regex, self.expect.final_not_regex]):
            re.compile(pattern)
        return self

    @property
    def needs_action(self) -> bool:
        """True when the golden script acts; a text-only answer must then fail."""
        return any(turn.tool_calls for turn in self.golden)


class Manifest(Strict):
    suite: Literal["layer_b"]
    version: Literal["3"]
    count: int
    categories: list[str]


def _folder() -> Any:
    return resources.files("servepack.smoke") / "suites" / SUITE


def load_cases(case_ids: Sequence[str] | None = None) -> tuple[list[LayerBCase], str]:
    """The shipped cases (all, or those named) and the sha256 over the manifest and case files."""
    folder = _folder()
    digest = hashlib.sha256()
    manifest_raw = (folder / "manifest.json").read_bytes()
    digest.update(b"manifest.json\0" + manifest_raw)
    manifest = Manifest.model_validate(json.loads(manifest_raw))
    cases: list[LayerBCase] = []
    for category in manifest.categories:
        node = folder / f"{category}.json"
        raw = node.read_bytes()
        digest.update(f"{category}.json\0".encode() + raw + b"\0")
        try:
            data = json.loads(raw)
            loaded = [LayerBCase.model_validate(c) for c in data["cases"]]
        except (ValueError, KeyError, ValidationError) as exc:
            raise UsageError(f"layer_b/{category}.json: invalid case data: {str(exc).splitlines()[0]}") from None
        wrong = [c.id for c in loaded if c.category != category]
        if wrong:
            raise UsageError(f"layer_b/{category}.json: cases {wrong} name another category")
        cases.extend(loaded)
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids) or len(cases) != manifest.count:
        raise UsageError(f"layer_b: {len(cases)} cases ({len(set(ids))} distinct), manifest.json says {manifest.count}")
    if case_ids:
        by_id = {c.id: c for c in cases}
        unknown = [i for i in case_ids if i not in by_id]
        if unknown:
            raise UsageError(f"suite layer_b: no case {', '.join(unknown)}; check --case ids")
        cases = [by_id[i] for i in case_ids]
    return cases, digest.hexdigest()
