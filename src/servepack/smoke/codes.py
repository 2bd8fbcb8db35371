"""Every verdict code a smoke runner can emit, in one table: its layer and what it means.

Codes are stable names; reports, tests and `failure_codes` rely on them. The one-response scorer
(`smoke.scorer`), the executed suite (`smoke.layer_b`), the BFCL suite (`smoke.bfcl`), the client and the
runner all build their findings through `finding()`, so a code missing here fails at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from servepack.smoke.result import Finding, Layer


@dataclass(frozen=True)
class Code:
    layer: Layer
    meaning: str


CODES: dict[str, Code] = {
    # transport: the exchange itself failed (client, or a recorded body without a usable answer)
    "TRANSPORT_CONNECT": Code("transport", "the server could not be reached or dropped the connection"),
    "TRANSPORT_TIMEOUT": Code("transport", "no answer within the client timeout"),
    "TRANSPORT_HTTP_ERROR": Code("transport", "the server answered with an HTTP error status"),
    "TRANSPORT_TEMPLATE_ERROR": Code("transport", "an HTTP/stream error that names the chat template or tool parser"),
    "TRANSPORT_BAD_RESPONSE": Code("transport", "the body is not JSON, or has no choices / no message to judge"),
    "TRANSPORT_TRUNCATED": Code("transport", "generation stopped at max_tokens (finish_reason 'length'); never a pass"),
    # extraction: reading tool calls / code out of the message
    "EXTRACTION_CALL_IN_CONTENT": Code("extraction", "a tool call written into content instead of native tool_calls"),
    "EXTRACTION_CALL_SHAPE": Code("extraction", "a native call without a function name, or not of type 'function'"),
    "EXTRACTION_ARGS_NOT_STRING": Code("extraction", "native arguments sent as a JSON object instead of a JSON string"),
    "EXTRACTION_ARGS_EMPTY": Code("extraction", "native arguments are an empty string, not a JSON object string"),
    "EXTRACTION_ARGS_NOT_JSON": Code("extraction", "arguments are not parsable JSON"),
    "EXTRACTION_ARGS_NOT_OBJECT": Code("extraction", "arguments parse to JSON that is not an object"),
    "EXTRACTION_NO_CODE": Code("extraction", "a code case whose answer holds no Python code block"),
    # schema: the tool's own JSON Schema, checked without coercion in strict
    "SCHEMA_TYPE": Code("schema", "an argument of the wrong JSON type (25.0 or '25' for an integer)"),
    "SCHEMA_REQUIRED": Code("schema", "a required argument is missing"),
    "SCHEMA_ADDITIONAL_PROPERTY": Code("schema", "an argument the schema does not allow"),
    "SCHEMA_ENUM": Code("schema", "a value outside the schema's enum/const"),
    "SCHEMA_RANGE": Code("schema", "a number or array size outside the schema's bounds"),
    "SCHEMA_FORMAT": Code("schema", "a string that breaks the schema's pattern/length/format"),
    "SCHEMA_INVALID": Code("schema", "any other schema violation"),
    "SCHEMA_INVALID_ARGS": Code("schema", "layer_b: arguments the tool rejected as invalid"),
    # semantics: what was done, judged against the case
    "SEM_NO_TOOL_CALL": Code("semantics", "a call was expected and none was made"),
    "SEM_INVENTED_TOOL": Code("semantics", "a call to a tool that was not offered"),
    "SEM_TOOL_NAME_NEAR_MISS": Code("semantics", "a misspelt offered tool name (case, separators, one typo)"),
    "SEM_WRONG_TOOL": Code("semantics", "an offered tool, but not the one the case needs"),
    "SEM_MISSING_CALL": Code("semantics", "one of several expected calls is missing"),
    "SEM_EXTRA_CALL": Code("semantics", "calls beyond those expected (and not allowed by allow_extra)"),
    "SEM_ORDER": Code("semantics", "expected calls came in the wrong order"),
    "SEM_ARG_VALUE": Code("semantics", "an argument value the case's matcher rejects"),
    "SEM_ARG_CONSTRAINT": Code("semantics", "arguments break the case's extra schema (a constraint from the chat)"),
    "SEM_UNEXPECTED_TOOL_CALL": Code("semantics", "a tool call where an answer (or code) was expected"),
    "SEM_EMPTY_ANSWER": Code("semantics", "an empty answer where text was expected"),
    "SEM_CONTENT_MISMATCH": Code("semantics", "the answer lacks what the case requires it to say"),
    "SEM_FORBIDDEN_CONTENT": Code("semantics", "the answer says something the case forbids (e.g. claims an action)"),
    "SEM_STEP_LIMIT": Code("semantics", "layer_b: the episode ran out of steps"),
    "SEM_TOOL_NOT_USED": Code("semantics", "layer_b: a tool the task needs was never used"),
    "SEM_TOOL_MISUSED": Code("semantics", "layer_b: a tool was used in a way the case forbids"),
    "SEM_FINAL_ANSWER_MISMATCH": Code("semantics", "layer_b: the final answer lacks what the case requires"),
    "CODE_STDOUT_MISMATCH": Code("semantics", "the answer's code ran but printed something else"),
    # sandbox
    "CODE_ERROR": Code("sandbox", "the answer's code exited non-zero"),
    "CODE_TIMEOUT": Code("sandbox", "the answer's code ran past its time limit"),
    "SANDBOX_REFUSED": Code("sandbox", "the sandbox would not run the code (isolation unavailable)"),
    "SANDBOX_UNAVAILABLE": Code("sandbox", "the sandbox module could not be imported"),
    "SANDBOX_TIMEOUT": Code("sandbox", "layer_b: a sandboxed tool ran past its time limit"),
    "SANDBOX_DISK_QUOTA": Code("sandbox", "layer_b: a sandboxed command filled its disk quota"),
    # stream
    "STREAM_MISMATCH": Code("stream", "the streamed response decided differently from the non-streamed one"),
    "STREAM_EPISODE_MISMATCH": Code("stream", "layer_b: the streamed episode decided differently"),
    # end state (layer_b, executed)
    "END_FILE_MISSING": Code("end_state", "a file the task should have written is missing"),
    "END_FILE_UNEXPECTED": Code("end_state", "a file exists that should not"),
    "END_FILE_CONTENT": Code("end_state", "a file's content is wrong"),
    "END_MEMORY_MISSING": Code("end_state", "a memory entry the task should have stored is missing"),
    "END_MEMORY_UNEXPECTED": Code("end_state", "a memory entry exists that should not"),
    "END_CRON_MISSING": Code("end_state", "a scheduled job is missing"),
    "END_CRON_COUNT": Code("end_state", "the wrong number of scheduled jobs"),
    "END_FORM_NOT_SUBMITTED": Code("end_state", "a browser form was not submitted"),
    "END_PAGE_NOT_VISITED": Code("end_state", "a page the task needs was not visited"),
    "END_DESTRUCTIVE_ACTION": Code("end_state", "a destructive action was carried out"),
    "END_OUTSIDE_WORKSPACE": Code("end_state", "a tool touched a path outside the workspace"),
    # BFCL (smoke.bfcl): the Berkeley Function Calling Leaderboard's AST rules
    "BFCL_DECODE": Code("extraction", "BFCL: no decodable call (none made, or arguments not a JSON object)"),
    "BFCL_WRONG_COUNT": Code("semantics", "BFCL: a different number of calls than the possible answer"),
    "BFCL_WRONG_FUNC_NAME": Code("semantics", "BFCL: the call names another function"),
    "BFCL_MISSING_REQUIRED": Code("schema", "BFCL: a required parameter is missing"),
    "BFCL_UNEXPECTED_PARAM": Code("schema", "BFCL: a parameter not in the function doc or not in the possible answer"),
    "BFCL_TYPE": Code("schema", "BFCL: a parameter of the wrong type (Python: int for float allowed; Java and "
                                "JavaScript: a string holding a value of the declared type)"),
    "BFCL_VALUE": Code("semantics", "BFCL: a value not among the possible answers"),
    "BFCL_MISSING_OPTIONAL": Code("semantics", "BFCL: an optional parameter the possible answer requires was left out"),
    "BFCL_NO_MATCH": Code("semantics", "BFCL parallel: an expected call matched none of the calls made"),
    "BFCL_IRRELEVANT_CALL": Code("semantics", "BFCL irrelevance: a function was called although none fits"),
    "BFCL_NO_CALL": Code("semantics", "BFCL relevance: no function was called although one fits"),
    "BFCL_MT_FORCE_TERMINATED": Code("semantics", "BFCL multi-turn: still calling tools after the step limit in a "
                                                  "turn before the last, so the conversation was cut off"),
    "BFCL_MT_EMPTY_TURN": Code("semantics", "BFCL multi-turn: no call made in a turn whose ground truth has calls"),
    "BFCL_MT_STATE": Code("end_state", "BFCL multi-turn: a backend's state after a turn differs from the ground "
                                       "truth's"),
    "BFCL_MT_RESPONSE": Code("semantics", "BFCL multi-turn: a ground-truth call's result is not among the model's "
                                          "results so far"),
    "BFCL_MT_BACKEND": Code("sandbox", "BFCL multi-turn: the sandboxed backend run failed"),
}


def layer_of(code: str) -> Layer:
    return CODES[code].layer


def finding(code: str, message: str, *, lenient_ok: bool = False) -> Finding:
    """A finding with the layer from the table; an unknown code raises KeyError (a bug, not a verdict)."""
    return Finding(code=code, layer=CODES[code].layer, message=message[:500], lenient_ok=lenient_ok)


def markdown_table() -> str:
    """The table as Markdown, for docs and reports."""
    rows = [f"| `{name}` | {c.layer} | {c.meaning} |" for name, c in CODES.items()]
    return "\n".join(["| code | layer | meaning |", "|---|---|---|", *rows])
