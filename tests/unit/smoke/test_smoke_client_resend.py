from __future__ import annotations

import httpx

from servepack.smoke.client import ChatClient

REPLY = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}


def _client(fail_times: int) -> tuple[ChatClient, list[int]]:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) <= fail_times:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        return httpx.Response(200, json=REPLY)

    c = ChatClient("http://127.0.0.1:9")
    c._http = httpx.Client(transport=httpx.MockTransport(handler))
    return c, calls


def test_unanswered_closed_connection_is_sent_once_more() -> None:
    c, calls = _client(1)
    ex = c.send({"model": "m", "messages": []}, "nonstream")
    assert len(calls) == 2 and ex.error_code is None and ex.response == REPLY


def test_second_unanswered_close_is_a_transport_failure() -> None:
    c, calls = _client(2)
    ex = c.send({"model": "m", "messages": []}, "nonstream")
    assert len(calls) == 2 and ex.error_code == "TRANSPORT_CONNECT" and ex.response is None
    assert "without sending a response" in (ex.error or "")
