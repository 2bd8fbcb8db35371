"""The server check behind every stall bound: streams past the floor together share one probe, and its verdict
names what the server failed."""

from __future__ import annotations

import asyncio

import httpx

from servepack.bench.liveness import ServerCheck
from servepack.engine.base import Endpoint

URL = "http://127.0.0.1:8080"


def _client(asked: list[str], *, answer: bool = True, delay_s: float = 0.05) -> httpx.AsyncClient:
    async def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        await asyncio.sleep(delay_s)
        if not answer:
            raise httpx.ReadTimeout("no answer", request=request)
        return httpx.Response(200, json={"status": "ok"})

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def _check(client: httpx.AsyncClient) -> ServerCheck:
    return ServerCheck(Endpoint(URL, "m", launched=False), client, floor_s=2.0)


def test_streams_past_the_floor_together_share_one_probe() -> None:
    asked: list[str] = []

    async def go() -> list[str | None]:
        async with _client(asked) as client, _check(client) as check:
            together = await asyncio.gather(*(check.probe() for _ in range(8)))
            later = await check.probe()
            return [*together, later]

    verdicts = asyncio.run(go())
    assert verdicts == [None] * 9
    # Wrong answers: one /health a stream (8 + 1), or a verdict kept past its probe (1)
    assert asked == ["/health", "/health"]


def test_a_caller_cut_off_leaves_the_shared_probe_to_the_others() -> None:
    asked: list[str] = []

    async def go() -> str | None:
        async with _client(asked, delay_s=0.2) as client, _check(client) as check:
            first = asyncio.ensure_future(check.probe())
            second = asyncio.ensure_future(check.probe())
            await asyncio.sleep(0.05)
            first.cancel()
            return await second

    assert asyncio.run(go()) is None and asked == ["/health"]


def test_a_server_that_neither_answers_nor_is_known_to_work_is_named() -> None:
    asked: list[str] = []

    async def go() -> str | None:
        async with _client(asked, answer=False) as client, _check(client) as check:
            return await check.probe()

    # no pid on this host: /health alone decides, and the verdict says the CPU time is not known
    assert asyncio.run(go()) == "/health unanswered within 1 s, the server's CPU time is not known here"


def test_the_waits_end_at_the_callers_stop() -> None:
    asked: list[str] = []

    async def go() -> tuple[float, bool]:
        async with _client(asked, answer=False) as client:
            check = ServerCheck(Endpoint(URL, "m", launched=False), client, floor_s=2.0, stopped=lambda: True)
            return await check.await_server(until=float("inf"))

    waited, answered = asyncio.run(go())
    assert answered is False and waited < 1.0 and asked == []  # Wrong answer: waiting forever for a stopped run

