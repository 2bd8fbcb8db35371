"""BFCL in servepack: AST rules on hand-made good and wrong answers, tool conversion, suite names, the runner."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from servepack.errors import UsageError
from servepack.smoke.bfcl import data as bfcl_data
from servepack.smoke.bfcl import runner as bfcl_runner
from servepack.smoke.bfcl.checker import check, decode, standardize
from servepack.smoke.bfcl.data import MT_CATEGORIES as MT
from servepack.smoke.bfcl.data import BfclEntry, subset, to_openai_tools
from servepack.smoke.bfcl.runner import full_suite, parse_suite, run_bfcl_suite, score_entry
from servepack.smoke.client import ChatExchange
from servepack.smoke.runners import SuiteOptions
from servepack.store import ResultsDir
from system_deps import missing

AREA = {"name": "geometry.area_circle", "description": "Area of a circle.", "parameters": {
    "type": "dict", "required": ["radius"], "properties": {
        "radius": {"type": "float", "description": "Radius."},
        "units": {"type": "string", "description": "Unit of length."},
        "precision": {"type": "integer", "description": "Decimals."},
        "exact": {"type": "boolean", "description": "Exact form."},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Labels."},
        "point": {"type": "tuple", "items": {"type": "integer"}, "description": "Centre."},
        "meta": {"type": "dict", "properties": {"by": {"type": "string"}}, "description": "Meta."},
        "rows": {"type": "array", "items": {"type": "dict", "properties": {"k": {"type": "integer"}}},
                 "description": "Rows."},
    }}}
WEATHER = {"name": "get_weather", "description": "Weather.", "parameters": {
    "type": "dict", "required": ["city"], "properties": {"city": {"type": "string", "description": "City."}}}}
AREA_ANSWER = {"geometry.area_circle": {
    "radius": [5.0], "units": ["meters", "m", ""], "precision": [2, ""], "exact": [False, ""],
    "tags": [["red", "big"], ""], "point": [[1, 2], ""], "meta": [{"by": ["Ann"]}, ""],
    "rows": [[{"k": [1]}, {"k": [2]}], ""]}}


def entry(category: str, functions: list[dict[str, Any]], answers: list[dict[str, Any]]) -> BfclEntry:
    return BfclEntry(id=f"{category}_0", category=category, messages=[{"role": "user", "content": "q"}],
                     functions=functions, ground_truth=answers)


def native(*calls: tuple[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function",
         "function": {"name": n, "arguments": a if isinstance(a, str) else json.dumps(a)}}
        for i, (n, a) in enumerate(calls)]}


SIMPLE = entry("simple", [AREA], [AREA_ANSWER])


@pytest.mark.parametrize("args", [
    {"radius": 5.0},
    {"radius": 5},  # an int where a float is declared is accepted
    {"radius": 5.0, "units": "M", "precision": 2},
    {"radius": 5.0, "units": "meters", "tags": ["Red", "big"], "point": [1, 2]},
    {"radius": 5.0, "meta": {"by": "ann"}, "rows": [{"k": 1}, {"k": 2}], "exact": False},
])
def test_good_simple_answers_pass(args: dict[str, Any]) -> None:
    assert score_entry(SIMPLE, native(("geometry_area_circle", args))).strict_pass


@pytest.mark.parametrize(("message", "code"), [
    ({"role": "assistant", "content": "The area is 78.5."}, "BFCL_DECODE"),
    (native(("geometry_area_circle", "{radius: 5}")), "BFCL_DECODE"),
    (native(("geometry.area_circle", {"radius": 5.0})), "BFCL_WRONG_FUNC_NAME"),  # the offered name has `_`
    (native(("geometry_area_circle", {"units": "m"})), "BFCL_MISSING_REQUIRED"),
    (native(("geometry_area_circle", {"radius": 5.0, "colour": "red"})), "BFCL_UNEXPECTED_PARAM"),
    (native(("geometry_area_circle", {"radius": "5.0"})), "BFCL_TYPE"),
    (native(("geometry_area_circle", {"radius": 5.0, "precision": 2.0})), "BFCL_TYPE"),
    (native(("geometry_area_circle", {"radius": 5.0, "exact": 0})), "BFCL_TYPE"),
    # Item types are not checked when "" is among the answers (as in BFCL); the value check catches it.
    (native(("geometry_area_circle", {"radius": 5.0, "point": ["1", "2"]})), "BFCL_VALUE"),
    (native(("geometry_area_circle", {"radius": 6.0})), "BFCL_VALUE"),
    (native(("geometry_area_circle", {"radius": 5.0, "units": "feet"})), "BFCL_VALUE"),
    (native(("geometry_area_circle", {"radius": 5.0, "tags": ["big", "red"]})), "BFCL_VALUE"),
    (native(("geometry_area_circle", {"radius": 5.0, "meta": {"by": "Bob"}})), "BFCL_VALUE"),
    (native(("geometry_area_circle", {"radius": 5.0, "rows": [{"k": 2}, {"k": 1}]})), "BFCL_VALUE"),
    (native(("geometry_area_circle", {"radius": 5.0}), ("geometry_area_circle", {"radius": 5.0})),
     "BFCL_WRONG_COUNT"),
])
def test_wrong_simple_answers_fail_with_their_rule(message: dict[str, Any], code: str) -> None:
    v = score_entry(SIMPLE, message)
    assert not v.strict_pass and v.codes == [code]


def test_item_types_are_checked_one_level_deep() -> None:
    e = entry("simple", [AREA], [{"geometry.area_circle": {"radius": [1.0], "point": [[1, 2]]}}])
    assert score_entry(e, native(("geometry_area_circle", {"radius": 1.0, "point": ["1", "2"]}))).codes == [
        "BFCL_TYPE"]
    assert score_entry(e, native(("geometry_area_circle", {"radius": 1.0, "point": [1, 2]}))).strict_pass


def test_an_optional_parameter_the_answer_needs_must_be_given() -> None:
    e = entry("simple", [WEATHER | {"parameters": {**WEATHER["parameters"], "properties": {
        "city": {"type": "string"}, "unit": {"type": "string"}}}}], [{"get_weather": {"city": ["Oslo"],
                                                                                      "unit": ["celsius"]}}])
    assert score_entry(e, native(("get_weather", {"city": "Oslo"}))).codes == ["BFCL_MISSING_OPTIONAL"]
    assert score_entry(e, native(("get_weather", {"city": "oslo", "unit": "Celsius"}))).strict_pass


def test_multiple_picks_the_right_function_among_several() -> None:
    e = entry("multiple", [WEATHER, AREA], [{"get_weather": {"city": ["Paris"]}}])
    assert score_entry(e, native(("get_weather", {"city": "Paris"}))).strict_pass
    assert score_entry(e, native(("geometry_area_circle", {"radius": 5}))).codes == ["BFCL_WRONG_FUNC_NAME"]


PARALLEL = entry("parallel", [WEATHER], [{"get_weather": {"city": ["Paris"]}}, {"get_weather": {"city": ["Oslo"]}}])


def test_parallel_matches_in_any_order() -> None:
    both = [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Paris"})]
    assert score_entry(PARALLEL, native(*both)).strict_pass
    assert score_entry(PARALLEL, native(*both[::-1])).strict_pass


@pytest.mark.parametrize(("calls", "code"), [
    ([("get_weather", {"city": "Oslo"})], "BFCL_WRONG_COUNT"),
    ([("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Oslo"})], "BFCL_NO_MATCH"),
    ([("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})], "BFCL_NO_MATCH"),
])
def test_parallel_wrong_answers_fail(calls: list[tuple[str, Any]], code: str) -> None:
    assert score_entry(PARALLEL, native(*calls)).codes == [code]


def test_parallel_multiple_uses_each_answers_own_doc() -> None:
    e = entry("parallel_multiple", [WEATHER, AREA],
              [{"get_weather": {"city": ["Rome"]}}, {"geometry.area_circle": {"radius": [2.0]}}])
    good = native(("geometry_area_circle", {"radius": 2}), ("get_weather", {"city": "Rome"}))
    assert score_entry(e, good).strict_pass
    bad = native(("geometry_area_circle", {"radius": 2}), ("get_weather", {"city": "Rome", "radius": 2}))
    assert score_entry(e, bad).codes == ["BFCL_NO_MATCH"]


def test_irrelevance_passes_only_without_a_call() -> None:
    e = entry("irrelevance", [WEATHER], [])
    assert score_entry(e, {"role": "assistant", "content": "No function here computes that."}).strict_pass
    v = score_entry(e, native(("get_weather", {"city": "Oslo"})))
    assert v.codes == ["BFCL_IRRELEVANT_CALL"] and not v.lenient_pass
    # BFCL's decoder: a call whose arguments do not parse is no call at all.
    assert score_entry(e, native(("get_weather", "{oops"))).strict_pass


def test_a_call_with_a_null_name_is_a_call_in_irrelevance() -> None:
    e = entry("irrelevance", [WEATHER], [])
    null_name = {"role": "assistant", "tool_calls": [{"type": "function",
                                                      "function": {"name": None, "arguments": '{"city": "Oslo"}'}}]}
    v = score_entry(e, null_name)
    assert not v.strict_pass and v.codes == ["BFCL_IRRELEVANT_CALL"]
    # Arguments that parse to a JSON value other than an object are not the function-calling format: no call.
    assert score_entry(e, native(("get_weather", "[1]"))).strict_pass
    simple = entry("simple", [WEATHER], [{"get_weather": {"city": ["Oslo"]}}])
    assert score_entry(simple, native(("get_weather", "[1]"))).codes == ["BFCL_DECODE"]
    assert score_entry(simple, null_name).codes == ["BFCL_WRONG_FUNC_NAME"]
    assert score_entry(e, {"role": "assistant", "content": "None of these tools does that."}).strict_pass


ROWS_OPTIONAL = entry("simple", [AREA], [{"geometry.area_circle": {"radius": [5.0], "rows": [""]}}])


def test_an_optional_list_of_dicts_whose_answer_is_empty_is_matched_by_an_empty_list() -> None:
    assert score_entry(ROWS_OPTIONAL, native(("geometry_area_circle", {"radius": 5.0, "rows": []}))).strict_pass
    assert score_entry(ROWS_OPTIONAL, native(("geometry_area_circle", {"radius": 5.0}))).strict_pass
    wrong = native(("geometry_area_circle", {"radius": 5.0, "rows": [{"k": 1}]}))
    assert score_entry(ROWS_OPTIONAL, wrong).codes == ["BFCL_VALUE"]
    # Where the answer needs rows, [] is no match.
    needed = entry("simple", [AREA], [{"geometry.area_circle": {"radius": [5.0], "rows": [[{"k": [1]}]]}}])
    assert score_entry(needed, native(("geometry_area_circle", {"radius": 5.0, "rows": []}))).codes == ["BFCL_VALUE"]


def test_lenient_reads_content_calls_and_object_arguments_strict_does_not() -> None:
    e = entry("simple", [WEATHER], [{"get_weather": {"city": ["Oslo"]}}])
    leaked = {"role": "assistant", "content": '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}'
                                              "</tool_call>"}
    v = score_entry(e, leaked)
    assert (v.strict_pass, v.lenient_pass, v.codes) == (False, True, ["BFCL_DECODE"])
    obj = {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                                                 "arguments": {"city": "Oslo"}}}]}
    assert decode(obj) is None and score_entry(e, obj).lenient_pass
    wrong = {"role": "assistant", "content": '{"name": "get_weather", "arguments": {"city": "Rome"}}'}
    assert not score_entry(e, wrong).lenient_pass


def test_standardize_matches_bfcl_string_rules() -> None:
    assert standardize("April 1, 2024") == standardize("april 1 2024") == "april12024"
    assert standardize("New-York_City") == "newyorkcity" and standardize("it's") == 'it"s'


def test_function_docs_become_openai_tools_as_bfcl_converts_them() -> None:
    (tool,) = to_openai_tools([AREA])
    fn = tool["function"]
    assert tool["type"] == "function" and fn["name"] == "geometry_area_circle"
    assert fn["description"].endswith("Note that the provided function is in Python 3 syntax.")
    props = fn["parameters"]["properties"]
    assert fn["parameters"]["type"] == "object"
    float_note = "Radius. This is a float type value."
    assert props["radius"] == {"type": "number", "format": "float", "description": float_note}
    assert props["point"]["type"] == "array" and props["point"]["items"]["type"] == "integer"
    assert props["meta"]["type"] == "object" and props["meta"]["properties"]["by"]["type"] == "string"
    assert props["rows"]["items"]["type"] == "object"
    assert props["rows"]["items"]["properties"]["k"]["type"] == "integer"
    assert AREA["name"] == "geometry.area_circle" and AREA["parameters"]["type"] == "dict"  # input untouched


def test_unknown_and_missing_types_become_strings() -> None:
    (tool,) = to_openai_tools([{"name": "f", "description": "d", "parameters": {"type": "dict", "properties": {
        "a": {"type": "any"}, "b": {"description": "no type"}, "c": {"type": "HashSet"}}}}])
    assert {k: v["type"] for k, v in tool["function"]["parameters"]["properties"].items()} == {
        "a": "string", "b": "string", "c": "string"}


ALL = ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
       "irrelevance", "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_relevance",
       "live_irrelevance"]


@pytest.mark.parametrize(("name", "cats", "size", "label"), [
    ("bfcl", ALL, 20, "bfcl"),
    ("bfcl:simple", ["simple_python"], 20, "bfcl-simple_python"),  # the name earlier runs used
    ("bfcl:simple_java,simple_javascript", ["simple_java", "simple_javascript"], 20,
     "bfcl-simple_java-simple_javascript"),
    ("bfcl:parallel,irrelevance@all", ["parallel", "irrelevance"], None, "bfcl-parallel-irrelevance-all"),
    ("bfcl@50", ALL, 50, "bfcl-n50"),
    ("bfcl:live@all", ALL[7:], None, "bfcl-" + "-".join(ALL[7:]) + "-all"),
    ("bfcl:non_live,live", ALL, 20, "bfcl"),
    ("bfcl:multi_turn@all", list(MT), None, "bfcl-multi_turn-all"),
    ("bfcl:multi_turn_base,multi_turn_long_context", ["multi_turn_base", "multi_turn_long_context"], 20,
     "bfcl-multi_turn_base-multi_turn_long_context"),
    ("bfcl:multiple,multi_turn_base@3", ["multiple", "multi_turn_base"], 3, "bfcl-multiple-multi_turn_base-n3"),
])
def test_suite_names(name: str, cats: list[str], size: int | None, label: str) -> None:
    assert parse_suite(name) == (cats, size, label)


def test_full_asks_for_every_entry_of_a_bfcl_suite_only() -> None:
    assert [full_suite(n) for n in ("bfcl", "bfcl:live@20", "bfcl@5", "agent_smoke")] == [
        "bfcl@all", "bfcl:live@all", "bfcl@all", "agent_smoke"]
    assert parse_suite(full_suite("bfcl:multiple"))[1] is None


@pytest.mark.parametrize("name", ["bfcl:java", "bfcl:multi_turn_math", "bfcl:simple@0", "bfcl:simple@some", "bfclx",
                                  "bfcl:simple@-3"])
def test_bad_suite_names_are_usage_errors(name: str) -> None:
    with pytest.raises(UsageError, match="--suite"):
        parse_suite(name)


def test_subset_is_deterministic_and_keeps_file_order() -> None:
    entries = [entry("simple", [WEATHER], []) for _ in range(50)]
    entries = [BfclEntry(f"simple_python_{i}", "simple", e.messages, e.functions, []) for i, e in enumerate(entries)]
    first, second = subset(entries, 20), subset(list(reversed(entries)), 20)
    assert len(first) == 20 and {e.id for e in first} == {e.id for e in second}
    assert [e.id for e in first] == sorted((e.id for e in first), key=lambda i: int(i.rsplit("_", 1)[1]))
    assert first != entries[:20] and subset(entries, None) == entries


def test_missing_package_is_a_usage_error_naming_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UsageError, match="pip install --no-deps bfcl-eval=="):
        bfcl_data.data_dir()


class FakeClient:
    """Answers each BFCL request with a canned message chosen by the request's first user message."""

    replies: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, base_url: str) -> None:
        self.sent: list[dict[str, Any]] = []

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def send(self, request: dict[str, Any], mode: str) -> ChatExchange:
        assert request["parallel_tool_calls"] is True and request["tools"][0]["type"] == "function"
        message = self.replies[request["messages"][0]["content"]]
        body = {"object": "chat.completion", "choices": [{"message": message, "finish_reason": "stop"}]}
        return ChatExchange(mode, request, body, 0.01)


def test_run_bfcl_suite_records_a_smoke_suite_result(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    good = BfclEntry("parallel_0", "parallel", [{"role": "user", "content": "two cities"}], [WEATHER],
                     PARALLEL.ground_truth)
    bad = BfclEntry("parallel_1", "parallel", [{"role": "user", "content": "one city"}], [WEATHER],
                    PARALLEL.ground_truth)
    FakeClient.replies = {"two cities": native(("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Paris"})),
                          "one city": native(("get_weather", {"city": "Oslo"}))}
    monkeypatch.setattr(bfcl_runner, "ChatClient", FakeClient)
    monkeypatch.setattr(bfcl_runner, "load_category", lambda c: [good, bad])
    monkeypatch.setattr(bfcl_runner, "files_sha256", lambda cats: "0" * 64)
    results = ResultsDir(tmp_path)
    res = run_bfcl_suite("http://127.0.0.1:9", "m", "bfcl:parallel", results,
                         SuiteOptions(temperature=0.0, max_tokens=64, modes=("nonstream",)))
    assert (res.suite, res.n, res.strict_passed) == ("bfcl-parallel", 2, 1)
    assert res.categories["parallel"].strict_passed == 1 and res.failure_codes == {"BFCL_WRONG_COUNT": 1}
    assert res.scorer_version.startswith("bfcl-ast") and res.suite_version.startswith("bfcl-eval")
    assert json.loads((tmp_path / "bfcl-parallel.json").read_text())["strict_passed"] == 1
    only = run_bfcl_suite("http://127.0.0.1:9", "m", "bfcl:parallel", None,
                          SuiteOptions(modes=("nonstream",), case_ids=["parallel_1"]))
    assert [c.case_id for c in only.cases] == ["parallel_1"]
    with pytest.raises(UsageError, match="no entry"):
        run_bfcl_suite("http://127.0.0.1:9", "m", "bfcl:parallel", None,
                       SuiteOptions(modes=("nonstream",), case_ids=["parallel_9"]))


@pytest.fixture
def bfcl_installed() -> None:
    if importlib.util.find_spec("bfcl_eval") is None:
        missing("BFCL's data is not installed", "pip install --no-deps bfcl-eval==2026.3.23, as make does")


needs_data = pytest.mark.usefixtures("bfcl_installed")


@needs_data
def test_the_packaged_data_loads_and_its_own_answers_pass() -> None:
    sizes = {"simple": 400, "multiple": 200, "parallel": 200, "parallel_multiple": 200, "irrelevance": 240}
    for category, n in sizes.items():
        entries = bfcl_data.load_category(category)
        assert len(entries) == n
        for e in subset(entries, 20):
            calls = [{bfcl_data.openai_name(name): {k: v[0] for k, v in params.items()
                                                    if v and v[0] != "" and not isinstance(v[0], dict | list)}}
                     for a in e.ground_truth for name, params in a.items()]
            flat = all(not isinstance(v[0], dict | list) for a in e.ground_truth
                       for p in a.values() for v in p.values() if v and v[0] != "")
            if flat:
                assert check(e, calls or None) is None, e.id
            no_call = check(e, None)
            assert no_call is None if category == "irrelevance" else (no_call or ("",))[0] == "BFCL_DECODE"


# --- Java, JavaScript and live categories (fixtures in BFCL's own format) ---------------------------------

JAVA_DOC = {"name": "Cache.put", "description": "Store a value.", "parameters": {
    "type": "dict", "required": ["key", "ttl"], "properties": {
        "key": {"type": "String", "description": "Key."},
        "ttl": {"type": "long", "description": "Seconds."},
        "ratio": {"type": "float", "description": "Fill."},
        "tags": {"type": "ArrayList", "items": {"type": "String"}, "description": "Tags."},
        "sizes": {"type": "Array", "items": {"type": "integer"}, "description": "Sizes."},
        "meta": {"type": "HashMap", "description": "Meta."},
        "on": {"type": "boolean", "description": "Enabled."}}}}
JAVA = BfclEntry("simple_java_0", "simple_java", [{"role": "user", "content": "q"}], [JAVA_DOC],
                 [{"Cache.put": {"key": ["user42"], "ttl": [60], "ratio": [0.5, ""], "tags": [["a", "b"], ""],
                                 "sizes": [[1, 2], ""], "meta": [{"owner": ["ann"]}, ""], "on": [True, ""]}}])


@pytest.mark.parametrize("args", [
    {"key": "user42", "ttl": "60L"},
    {"key": "USER42", "ttl": "60l", "ratio": "0.5f", "on": "true"},
    {"key": "user42", "ttl": "60L", "tags": 'new ArrayList<>(Arrays.asList("a", "b"))', "sizes": "new int[]{1, 2}"},
    {"key": "user42", "ttl": "60L", "tags": 'new ArrayList<String>() {{ add("a"); add("b"); }}'},
    {"key": "user42", "ttl": "60L", "meta": 'new HashMap<String, String>() {{ put("owner", "ann"); }}'},
])
def test_java_values_written_in_java_pass(args: dict[str, Any]) -> None:
    assert score_entry(JAVA, native(("Cache_put", args))).strict_pass


@pytest.mark.parametrize(("args", "code"), [
    ({"key": "user42", "ttl": 60}, "BFCL_TYPE"),  # a JSON number, not Java written as a string
    ({"key": "user42", "ttl": "60"}, "BFCL_TYPE"),  # a long needs its L: "60" stays text, not a long
    ({"key": "user42", "ttl": "60L", "ratio": "0.5"}, "BFCL_TYPE"),  # a float needs its f
    ({"key": "user42", "ttl": "60L", "on": True}, "BFCL_TYPE"),
    ({"key": "user42", "ttl": "60L", "sizes": "new int[]{2, 1}"}, "BFCL_VALUE"),
    ({"key": "user42", "ttl": "60L", "tags": '["a", "b"]'}, "BFCL_TYPE"),  # JSON, not Java: stays text
    ({"key": "user41", "ttl": "60L"}, "BFCL_VALUE"),
])
def test_wrong_java_values_fail(args: dict[str, Any], code: str) -> None:
    assert score_entry(JAVA, native(("Cache_put", args))).codes == [code]


JS_DOC = {"name": "plot", "description": "Plot.", "parameters": {"type": "dict", "required": ["id"], "properties": {
    "id": {"type": "String", "description": "Element."},
    "points": {"type": "array", "items": {"type": "integer"}, "description": "Points."},
    "opts": {"type": "dict", "properties": {"color": {"type": "String"}}, "description": "Options."},
    "big": {"type": "Bigint", "description": "Big."}}}}
JS = BfclEntry("simple_javascript_0", "simple_javascript", [{"role": "user", "content": "q"}], [JS_DOC],
               [{"plot": {"id": ["chart"], "points": [[1, 2, 3], ""], "opts": [{"color": ["red"]}, ""],
                          "big": [12, ""]}}])


def test_javascript_values_are_read_as_javascript() -> None:
    good = {"id": "'chart'", "points": "[1, 2, 3]", "opts": "{color: 'red'}", "big": "12n"}
    assert score_entry(JS, native(("plot", good))).strict_pass
    assert score_entry(JS, native(("plot", {"id": "chart", "points": "new Array(1, 2, 3)"}))).strict_pass
    assert score_entry(JS, native(("plot", {"id": "chart", "points": [1, 2, 3]}))).codes == ["BFCL_TYPE"]
    assert score_entry(JS, native(("plot", {"id": "chart", "points": "[3, 2, 1]"}))).codes == ["BFCL_VALUE"]
    assert score_entry(JS, native(("plot", {"id": "chart", "big": "12"}))).codes == ["BFCL_TYPE"]  # needs its n
    assert score_entry(JS, native(("plot", {"id": "chart", "opts": "{color: 'blue'}"}))).codes == ["BFCL_VALUE"]


def test_java_and_javascript_docs_become_string_parameters_with_bfcls_hints() -> None:
    (tool,) = to_openai_tools([JAVA_DOC], "simple_java")
    fn = tool["function"]
    assert fn["name"] == "Cache_put" and fn["description"].endswith("in Java 8 SDK syntax.")
    props = fn["parameters"]["properties"]
    assert {p["type"] for p in props.values()} == {"string"} and "items" not in props["tags"]
    assert props["ttl"]["description"].endswith("This is Java long type parameter in string representation.")
    assert "elements are of type String" in props["tags"]["description"]
    (tool,) = to_openai_tools([JS_DOC], "simple_javascript")
    props = tool["function"]["parameters"]["properties"]
    assert tool["function"]["description"].endswith("in JavaScript syntax.") and "properties" not in props["opts"]
    assert '{"color": {"type": "String"}}' in props["opts"]["description"]
    (tool,) = to_openai_tools([AREA], "live_simple")
    assert tool["function"]["parameters"]["properties"]["radius"]["type"] == "number"


def test_live_categories_take_the_rules_of_their_namesakes() -> None:
    live = BfclEntry("live_parallel_0-0-0", "live_parallel", [{"role": "user", "content": "q"}], [WEATHER],
                     PARALLEL.ground_truth)
    both = [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Paris"})]
    assert score_entry(live, native(*both[::-1])).strict_pass
    assert score_entry(live, native(both[0])).codes == ["BFCL_WRONG_COUNT"]
    relevance = BfclEntry("live_relevance_0-0-0", "live_relevance", live.messages, [WEATHER], [])
    assert score_entry(relevance, native(("get_weather", {"city": "Rome"}))).strict_pass
    assert score_entry(relevance, {"role": "assistant", "content": "Rome is sunny."}).codes == ["BFCL_NO_CALL"]
    irrelevance = BfclEntry("live_irrelevance_0-0-0", "live_irrelevance", live.messages, [WEATHER], [])
    assert score_entry(irrelevance, {"role": "assistant", "content": "I cannot."}).strict_pass
    assert score_entry(irrelevance, native(("get_weather", {"city": "Rome"}))).codes == ["BFCL_IRRELEVANT_CALL"]


def test_fixture_files_in_bfcls_format_load_and_score(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "possible_answer").mkdir()
    question = {"id": "simple_java_0", "question": [[{"role": "user", "content": "Cache user42 for a minute."}]],
                "function": [JAVA_DOC]}
    answer = {"id": "simple_java_0", "ground_truth": JAVA.ground_truth}
    relevance = {"id": "live_relevance_0-0-0", "question": [[{"role": "user", "content": "Weather in Oslo?"}]],
                 "function": [WEATHER]}
    (tmp_path / "BFCL_v4_simple_java.json").write_text(json.dumps(question) + "\n")
    (tmp_path / "possible_answer" / "BFCL_v4_simple_java.json").write_text(json.dumps(answer) + "\n")
    (tmp_path / "BFCL_v4_live_relevance.json").write_text(json.dumps(relevance) + "\n")
    monkeypatch.setattr(bfcl_data, "data_dir", lambda: tmp_path)
    (java,) = bfcl_data.load_category("simple_java")
    assert (java.category, java.messages[0]["content"]) == ("simple_java", "Cache user42 for a minute.")
    assert java.tools[0]["function"]["parameters"]["properties"]["ttl"]["type"] == "string"
    assert score_entry(java, native(("Cache_put", {"key": "user42", "ttl": "60L"}))).strict_pass
    assert score_entry(java, native(("Cache_put", {"key": "user42", "ttl": "61L"}))).codes == ["BFCL_VALUE"]
    (rel,) = bfcl_data.load_category("live_relevance")  # no possible-answer file: any call passes
    assert rel.ground_truth == [] and score_entry(rel, native(("get_weather", {"city": "Oslo"}))).strict_pass
    (tmp_path / "possible_answer" / "BFCL_v4_simple_java.json").write_text("")
    with pytest.raises(UsageError, match="no possible answer for simple_java_0"):
        bfcl_data.load_category("simple_java")
