"""Smoke cases as data: the case schema, value matchers, and the loader of suites shipped in the package.

A suite is a folder `smoke/suites/<suite>/` holding `suite.json` (name, version, expected count,
categories) and one JSON file per category: `{"cases": [...]}`. Every case carries a golden assistant
message that must pass strict and adversarial answers (plausible wrong ones, written by hand) that must
fail, so a suite tests itself and its scorer. Where a case could be passed by wording alone, it is decided
by structure (which tool, which arguments, what a shell would run) or by specific wording, and its
rationale says which.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from servepack.errors import UsageError
from servepack.safepath import names_something, read_bounded
from servepack.strict import Strict

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

CASE_ID_RE = r"^[a-z0-9][a-z0-9_.-]*$"
MAX_CASE_FILE_BYTES = 1 << 20
_MISSING = object()


class CaseModel(Strict):
    """A case file's part: strict (the one base) and frozen."""

    model_config = ConfigDict(frozen=True)


class ShellRule(CaseModel):
    """A shell command line judged by what a shell would run (see `smoke.shell`), not by its text."""

    allow: list[str] = Field(min_length=1, description="programs the line may run, each used read-only")


class Matcher(CaseModel):
    """One check on one argument value; exactly one of the fields is set."""

    exact: Any = Field(None, description="equal, type included (42 is not '42', 1 is not true)")
    regex: str | None = Field(None, description="re.search on a string value")
    not_regex: str | None = Field(None, description="a string value that must NOT match (re.search)")
    one_of: list[Any] | None = Field(None, description="equal to one of these, type included")
    approx: float | None = Field(None, description="a number within `tolerance` of this")
    tolerance: float = Field(0.0, ge=0, description="absolute tolerance for `approx`")
    absent: bool = Field(False, description="the argument must not be present")
    shell: ShellRule | None = Field(None, description="a command line running only allowed programs, read-only")

    def _others(self) -> list[str]:
        named = [k for k in ("regex", "not_regex", "one_of", "approx", "shell") if getattr(self, k) is not None]
        return [*named, "absent"] if self.absent else named

    @property
    def has_exact(self) -> bool:
        """`exact` was given; a full dump of another matcher carries `exact: null`, which does not count."""
        return "exact" in self.model_fields_set and (self.exact is not None or not self._others())

    @model_validator(mode="after")
    def _exactly_one(self) -> Matcher:
        set_ = self._others() + (["exact"] if self.has_exact else [])
        if len(set_) != 1:
            raise ValueError(f"a matcher sets exactly one of exact/regex/not_regex/one_of/approx/shell/absent: {set_}")
        for pattern in (self.regex, self.not_regex):
            if pattern is not None:
                re.compile(pattern)
        return self

    def check(self, value: Any, *, lenient: bool = False) -> str | None:
        """None when the value passes, else a short reason."""
        if self.absent:
            return None if value is _MISSING else f"must be absent, got {value!r}"
        if value is _MISSING:
            return "missing"
        if lenient:
            value = _lenient_scalar(value, self)
        if self.has_exact:
            return None if same_value(value, self.exact) else f"expected {self.exact!r}, got {value!r}"
        if self.one_of is not None:
            if any(same_value(value, v) for v in self.one_of):
                return None
            return f"expected one of {self.one_of!r}, got {value!r}"
        if self.approx is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                return f"expected a number near {self.approx}, got {value!r}"
            ok = math.isclose(float(value), self.approx, abs_tol=self.tolerance)
            return None if ok else f"expected {self.approx}±{self.tolerance}, got {value!r}"
        if not isinstance(value, str):
            return f"expected a string, got {value!r}"
        if self.shell is not None:
            from servepack.smoke.shell import read_only_problem

            problem = read_only_problem(value, self.shell.allow)
            return f"{value[:80]!r}: {problem}" if problem else None
        if self.regex is not None and not re.search(self.regex, value):
            return f"{value!r} does not match /{self.regex}/"
        if self.not_regex is not None and re.search(self.not_regex, value):
            return f"{value!r} matches forbidden /{self.not_regex}/"
        return None


def same_value(value: Any, expected: Any) -> bool:
    """Deep equality that keeps JSON types apart: True is not 1, and 25.0 is not the integer 25.

    A number where a float is expected may be written without a fraction (42 meets 42.0).
    """
    a, b = value, expected
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(b, int) and isinstance(a, float):
        return False
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _lenient_scalar(value: Any, matcher: Matcher) -> Any:
    """What a forgiving runtime would read: '42' as 42 when a number is expected."""
    wants_number = matcher.approx is not None or isinstance(matcher.exact, int | float)
    if isinstance(matcher.exact, bool) or not wants_number:
        return value
    if isinstance(value, float) and value.is_integer() and isinstance(matcher.exact, int):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value) if re.fullmatch(r"-?\d+", value.strip()) else float(value)
        except ValueError:
            return value
    return value


def lookup(args: Any, path: str) -> Any:
    """Value at a dotted path (`a.b.0`) inside parsed arguments, or the _MISSING sentinel."""
    node = args
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


class CallSpec(CaseModel):
    """One expected tool call."""

    name: str
    arguments_schema: dict[str, Any] | None = Field(
        None, description="JSON Schema (2020-12) the arguments must satisfy beyond the tool's own schema"
    )
    args: dict[str, Matcher | list[Matcher]] = Field(
        default_factory=dict, description="dotted path → value matcher (a list: every matcher must hold)"
    )


class ExpectToolCalls(CaseModel):
    kind: Literal["tool_calls"]
    calls: list[CallSpec] = Field(min_length=1)
    ordered: bool = Field(False, description="the calls must come in this order")
    allow_extra: bool | list[str] = Field(
        False, description="further calls are tolerated: true for any offered tool, or a list of tool names"
    )


class ExpectNoToolCall(CaseModel):
    kind: Literal["no_tool_call"]
    content_regex: str | None = Field(None, description="re.search on the answer text (use (?i) for case)")
    content_not_regex: str | None = Field(None, description="the answer must not match this")


class ExpectCode(CaseModel):
    kind: Literal["code"]
    stdout: str = Field(description="exact stdout of the answer's code followed by `driver`")
    driver: str = Field("", description="code appended after the answer's code, e.g. prints of calls")
    timeout_s: float = Field(10.0, gt=0)


class Adversarial(CaseModel):
    """A plausible wrong answer, written as a skeptical reviewer would, with the reason it is wrong."""

    why: str = Field(min_length=5, description="one line: what is wrong with this answer")
    fails: Literal["both", "strict"] = Field(
        "both", description="'strict': a forgiving runtime would accept it (wire-format faults only)"
    )
    message: dict[str, Any] = Field(description="the assistant message to score")


Expect = Annotated[ExpectToolCalls | ExpectNoToolCall | ExpectCode, Field(discriminator="kind")]


class Case(CaseModel):
    """One smoke case: a request to send and what a correct response looks like."""

    id: str = Field(pattern=CASE_ID_RE)
    suite: str
    category: str
    version: int = Field(1, ge=1)
    rationale: str = Field(min_length=10, description="one line: the failure this case catches")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI function tool schemas")
    messages: list[dict[str, Any]] = Field(min_length=1)
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = Field(
        None, description="sent when set; llama-server allows one call per response unless this is true"
    )
    expect: Expect
    also_accept: list[Expect] = Field(default_factory=list, description="other responses that also pass")
    golden: dict[str, Any] = Field(description="an assistant message that must pass strict")
    adversarial: list[Adversarial] = Field(
        default_factory=list, description="plausible wrong answers the scorer must fail (the suite's self-test)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Case:
        if "\n" in self.rationale:
            raise ValueError("rationale must be one line")
        offered = self.tool_names
        for exp in (self.expect, *self.also_accept):
            if isinstance(exp, ExpectToolCalls):
                unknown = [c.name for c in exp.calls if c.name not in offered]
                if unknown:
                    raise ValueError(f"expected calls to tools not offered: {unknown}")
        return self

    @property
    def tool_names(self) -> list[str]:
        return [t.get("function", {}).get("name", "") for t in self.tools]

    def tool_schema(self, name: str) -> dict[str, Any] | None:
        for t in self.tools:
            fn = t.get("function", {})
            if fn.get("name") == name:
                params = fn.get("parameters")
                return params if isinstance(params, dict) else {"type": "object"}
        return None

    @property
    def expects_action(self) -> bool:
        """True when only a tool call or code passes (a plain 'do-nothing' answer must fail)."""
        return all(not isinstance(e, ExpectNoToolCall) for e in (self.expect, *self.also_accept))


class SuiteManifest(CaseModel):
    suite: str
    version: str
    description: str
    count: int = Field(ge=1, description="number of cases the suite must hold")
    categories: list[str] = Field(min_length=1)


class CategoryFile(CaseModel):
    cases: list[Case] = Field(min_length=1)


@dataclass(frozen=True)
class Suite:
    """A loaded suite: its manifest, its cases in file order, and the sha256 of its files."""

    manifest: SuiteManifest
    cases: tuple[Case, ...]
    files_sha256: str

    @property
    def name(self) -> str:
        return self.manifest.suite

    def select(self, case_ids: list[str] | None) -> tuple[Case, ...]:
        if not case_ids:
            return self.cases
        by_id = {c.id: c for c in self.cases}
        unknown = [i for i in case_ids if i not in by_id]
        if unknown:
            raise UsageError(f"suite {self.name}: no case {', '.join(unknown)}; check --case ids")
        return tuple(by_id[i] for i in case_ids)


def suites_root() -> Traversable:
    return resources.files("servepack.smoke") / "suites"


def suite_names() -> list[str]:
    return sorted(p.name for p in suites_root().iterdir() if p.is_dir() and (p / "suite.json").is_file())


def _read_json(node: Traversable, what: str) -> Any:
    try:
        return json.loads(node.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{what}: not valid JSON: {exc}") from None


def _validation_line(what: str, exc: ValidationError) -> str:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    return f"{what}: field {loc}: {first['msg']}"


def load_suite(name: str) -> Suite:
    """Load and check a shipped suite (manifest count, categories, ids, suite field). `name` is looked up in the
    list of shipped suites, never used as a path: a name too long for a path (ENAMETOOLONG), '../x' or a NUL byte
    is no suite, one UsageError line, whoever calls (the run's --suite, a recorded suite being rescored)."""
    known = suite_names()
    if name not in known:
        raise UsageError(f"no smoke suite {name[:100]!r}; known: {', '.join(known)} (check --suite)")
    folder = suites_root() / name
    try:
        manifest = SuiteManifest.model_validate(_read_json(folder / "suite.json", f"{name}/suite.json"))
    except ValidationError as exc:
        raise UsageError(_validation_line(f"{name}/suite.json", exc)) from None
    digest = hashlib.sha256()
    cases: list[Case] = []
    for category in manifest.categories:
        node = folder / f"{category}.json"
        what = f"{name}/{category}.json"
        if not node.is_file():
            raise UsageError(f"{what}: missing; suite.json lists category {category}")
        raw = node.read_bytes()
        digest.update(f"{category}.json\0".encode() + raw + b"\0")
        try:
            loaded = CategoryFile.model_validate(_read_json(node, what))
        except ValidationError as exc:
            raise UsageError(_validation_line(what, exc)) from None
        for case in loaded.cases:
            if case.suite != name or case.category != category:
                raise UsageError(f"{what}: case {case.id} says {case.suite}/{case.category}")
        cases.extend(loaded.cases)
    ids = [c.id for c in cases]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise UsageError(f"suite {name}: duplicate case ids {dupes}")
    if len(cases) != manifest.count:
        raise UsageError(f"suite {name}: {len(cases)} cases, suite.json says {manifest.count}")
    manifest_raw = (folder / "suite.json").read_bytes()
    digest.update(b"suite.json\0" + manifest_raw)
    return Suite(manifest=manifest, cases=tuple(cases), files_sha256=digest.hexdigest())


def load_case_ref(ref: str) -> Case:
    """A case from a JSON file (one case, or a category file with one case) or `suite/case_id`."""
    path = Path(ref)
    if names_something(path):
        raw = read_bounded(path, MAX_CASE_FILE_BYTES, "give a JSON case file or suite/case_id", label=f"--case {path}")
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, RecursionError):
            raise UsageError(f"--case {ref}: not a UTF-8 JSON case file (binary, or nested too deeply); "
                             "give a case JSON file or SUITE/CASE_ID") from None
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: not a readable JSON case file: {exc}") from None
        if isinstance(data, dict) and isinstance(data.get("cases"), list):
            if len(data["cases"]) != 1:
                raise UsageError(f"{path}: holds {len(data['cases'])} cases; pass suite/case_id instead")
            data = data["cases"][0]
        try:
            return Case.model_validate(data)
        except ValidationError as exc:
            raise UsageError(_validation_line(str(path), exc)) from None
    if "/" in ref:
        suite, case_id = ref.split("/", 1)
        return load_suite(suite).select([case_id])[0]
    raise UsageError(f"--case {ref}: neither a file nor suite/case_id")
