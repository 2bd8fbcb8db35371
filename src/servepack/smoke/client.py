"""A small chat-completions client for smoke runs: one request, non-streamed or streamed, never raises.

Streamed responses are reassembled into the shape of a non-streamed body; tool-call deltas are merged by
their `index`, as the OpenAI wire format defines, so the two modes can be judged by the same scorer.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

import httpx

_TEMPLATE_HINTS = ("template", "jinja", "parse", "tool call", "--jinja", "grammar")


@dataclass(frozen=True)
class ChatExchange:
    """One request and what came back: a body (or reassembled stream), or a transport error code."""

    mode: str
    request: dict[str, Any]
    response: dict[str, Any] | None
    duration_s: float
    error_code: str | None = None
    error: str | None = None

    @property
    def message(self) -> dict[str, Any]:
        return body_message(self.response or {})[0]

    @property
    def finish_reason(self) -> str | None:
        return body_message(self.response or {})[1]


def body_message(body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The first choice's message and finish_reason ({} and None where the body has none)."""
    choices = body.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(first, dict):
        return {}, None
    msg, finish = first.get("message"), first.get("finish_reason")
    return (msg if isinstance(msg, dict) else {}), (finish if isinstance(finish, str) else None)


def body_problem(data: Any) -> tuple[str, str] | None:
    """A transport (code, message) when a 200 body holds no message to judge; None when it does."""
    if not isinstance(data, dict):
        return "TRANSPORT_BAD_RESPONSE", f"body is not a JSON object: {str(data)[:200]!r}"
    if "error" in data:
        text = json.dumps(data["error"])
        return _http_error_code(500, text), f"error in body: {text[:300]}"
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return "TRANSPORT_BAD_RESPONSE", "body has no choices"
    if not isinstance(choices[0], dict) or not isinstance(choices[0].get("message"), dict):
        return "TRANSPORT_BAD_RESPONSE", "body's first choice has no message"
    return None


def error_code_of(error: str) -> str:
    """The transport code of an error text this client recorded (for offline re-scoring of attempts)."""
    http = re.match(r"HTTP (\d{3}): (.*)", error, re.S)
    if http:
        return _http_error_code(int(http.group(1)), http.group(2))
    if error.startswith("timed out"):
        return "TRANSPORT_TIMEOUT"
    if error.startswith(("error in stream", "error in body")):
        return _http_error_code(500, error)
    if error.startswith(("body ", "stream ")):
        return "TRANSPORT_BAD_RESPONSE"
    return "TRANSPORT_CONNECT"


def api_root(base_url: str) -> str:
    """Accept both `http://host:port` and `http://host:port/v1`."""
    root = base_url.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


def _http_error_code(status: int, text: str) -> str:
    lowered = text.lower()
    if status >= 400 and any(h in lowered for h in _TEMPLATE_HINTS):
        return "TRANSPORT_TEMPLATE_ERROR"
    return "TRANSPORT_HTTP_ERROR"


class ChatClient:
    """POST /v1/chat/completions against one server."""

    def __init__(self, base_url: str, *, timeout_s: float = 600.0, api_key: str = "servepack") -> None:
        self._url = f"{api_root(base_url)}/v1/chat/completions"
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=10.0), headers={"Authorization": f"Bearer {api_key}"}
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, request: dict[str, Any], mode: str) -> ChatExchange:
        """Send `request` non-streamed (`mode="nonstream"`) or streamed (`"stream"`)."""
        body = {**request, "stream": mode == "stream"}
        t0 = time.perf_counter()
        for attempt in (1, 2):
            try:
                response, code, err = self._stream(body) if mode == "stream" else self._once(body)
            except httpx.TimeoutException as exc:
                response, code, err = None, "TRANSPORT_TIMEOUT", f"timed out: {exc}"
            except httpx.RemoteProtocolError as exc:
                # A keep-alive connection the server closed while idle: unanswered, so sent once more.
                if attempt == 1 and "without sending a response" in str(exc):
                    continue
                response, code, err = None, "TRANSPORT_CONNECT", f"{type(exc).__name__}: {exc}"
            except httpx.TransportError as exc:
                response, code, err = None, "TRANSPORT_CONNECT", f"{type(exc).__name__}: {exc}"
            break
        return ChatExchange(mode, body, response, time.perf_counter() - t0, code, err)

    def _once(self, body: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None, str | None]:
        r = self._http.post(self._url, json=body)
        if r.status_code != 200:
            return _error_body(r.text), _http_error_code(r.status_code, r.text), f"HTTP {r.status_code}: {r.text[:300]}"
        try:
            data = r.json()
        except ValueError:
            return None, "TRANSPORT_BAD_RESPONSE", f"body is not JSON: {r.text[:200]!r}"
        problem = body_problem(data)
        if problem:
            return _as_dict(data), *problem
        return data, None, None

    def _stream(self, body: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None, str | None]:
        acc = StreamAccumulator()
        with self._http.stream("POST", self._url, json=body) as r:
            if r.status_code != 200:
                text = r.read().decode(errors="replace")
                return _error_body(text), _http_error_code(r.status_code, text), f"HTTP {r.status_code}: {text[:300]}"
            for line in r.iter_lines():
                problem = acc.feed_line(line)
                if problem:
                    return acc.result(), *problem
        if not acc.done and acc.chunks == 0:
            return acc.result(), "TRANSPORT_BAD_RESPONSE", "stream ended without any chunk"
        return acc.result(), None, None


def _as_dict(data: Any) -> dict[str, Any] | None:
    return data if isinstance(data, dict) else None


def _error_body(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {"error_text": text[:2000]}
    return data if isinstance(data, dict) else {"error_text": text[:2000]}


class StreamAccumulator:
    """Reassembles SSE chat-completion chunks into one non-streamed-shaped body."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.meta: dict[str, Any] = {}
        self.chunks = 0
        self.done = False

    def feed_line(self, line: str) -> tuple[str, str] | None:
        """Consume one SSE line; a (code, message) pair when the stream reports an error or garbage."""
        if not line.startswith("data:"):
            return None
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return None
        try:
            chunk = json.loads(payload)
        except ValueError:
            return "TRANSPORT_BAD_RESPONSE", f"stream chunk is not JSON: {payload[:200]!r}"
        if not isinstance(chunk, dict):
            return "TRANSPORT_BAD_RESPONSE", f"stream chunk is not an object: {payload[:200]!r}"
        if "error" in chunk:
            text = json.dumps(chunk["error"])
            return _http_error_code(500, text), f"error in stream: {text[:300]}"
        self.feed(chunk)
        return None

    def feed(self, chunk: dict[str, Any]) -> None:
        self.chunks += 1
        for key in ("id", "model", "created", "system_fingerprint"):
            if key in chunk and key not in self.meta:
                self.meta[key] = chunk[key]
        for key in ("usage", "timings"):
            if chunk.get(key):
                self.meta[key] = chunk[key]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self.content.append(delta["content"])
            if isinstance(delta.get("reasoning_content"), str):
                self.reasoning.append(delta["reasoning_content"])
            for tc in delta.get("tool_calls") or []:
                self._merge_call(tc)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def _merge_call(self, tc: dict[str, Any]) -> None:
        index = tc.get("index")
        index = int(index) if isinstance(index, int) else len(self.calls)
        slot = self.calls.setdefault(index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
        if tc.get("id") and not slot["id"]:
            slot["id"] = tc["id"]
        fn = tc.get("function") or {}
        name = fn.get("name")
        # Names arrive whole in the first delta; a server that repeats them must not double them.
        if isinstance(name, str) and name and name != slot["function"]["name"]:
            slot["function"]["name"] += name
        args = fn.get("arguments")
        if isinstance(args, str) and isinstance(slot["function"]["arguments"], str):
            slot["function"]["arguments"] += args
        elif isinstance(args, dict) and slot["function"]["arguments"] in ("", {}):
            # Not the wire format (arguments are a JSON string); kept as sent, so strict judges it as non-streamed.
            slot["function"]["arguments"] = args

    def result(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        body: dict[str, Any] = {"object": "chat.completion", **self.meta}
        body["choices"] = [{"index": 0, "message": message, "finish_reason": self.finish_reason}]
        body["stream_chunks"] = self.chunks
        return body
