"""One measured request: parse its SSE events, check freshness and length, derive the glossary metrics."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic import AliasChoices, Field

from servepack.bench.client import StreamExchange
from servepack.bench.stats import quantile
from servepack.host.contention import HostReading
from servepack.strict import Strict

REQUEST_SCHEMA: Final = "servepack.bench.request/v2"
# v1 (before samples were set aside): every ok sample was in the figures; v2 adds `set_aside` and names the two
# prefill quantities apart (PREFILL_LEGACY: v1's names, still read).
REQUEST_SCHEMA_V1: Final = "servepack.bench.request/v1"


# Prefill is two different quantities, named apart in every record, MEASURED.md and the page; defined here only.
PROMPT_EVAL: Final = "prompt_eval_tok_s_server"
PROMPT_PER_TTFT: Final = "prompt_per_ttft_tok_s_client"
PREFILL_DEFINITIONS: Final = {
    PROMPT_EVAL: "prompt eval rate: the server's own prompt processing speed, timings.prompt_n ÷ timings.prompt_ms "
                 "(fresh samples)",
    PROMPT_PER_TTFT: "prompt ÷ TTFT: server-counted prompt tokens ÷ the time to the first token at the client, "
                     "queueing, the HTTP path and the first decode step included (fresh samples)",
}
PREFILL_LABELS: Final = {PROMPT_EVAL: "prompt eval tok/s (server)", PROMPT_PER_TTFT: "prompt ÷ TTFT tok/s (client)"}
# Their names before v2 of the records (both were "prefill"); readers accept these and write the new ones.
PREFILL_LEGACY: Final = {"prefill_tok_s_server": PROMPT_EVAL, "prefill_tok_s_client": PROMPT_PER_TTFT}


def metric_field(metric: str, source: str) -> str:
    """The record field of a pack's headline or promotion metric (`prefill_tok_s` + source → one of the two)."""
    if metric == "ttft_ms":
        return metric
    if metric == "prefill_tok_s":
        return PROMPT_EVAL if source == "server" else PROMPT_PER_TTFT
    return f"{metric}_{source}"


def metric_label(metric: str, source: str) -> str:
    """How a pack's metric is named for people: the two prefill quantities by what they are."""
    if metric == "prefill_tok_s":
        return PREFILL_LABELS[metric_field(metric, source)]
    if metric == "ttft_ms":
        return "TTFT ms (client)"
    return f"{metric.replace('_tok_s', ' tok/s')} ({source})"


def prefill_alias(name: str) -> AliasChoices:
    """Read a renamed prefill field under its new name or its pre-v2 one."""
    return AliasChoices(name, next(old for old, new in PREFILL_LEGACY.items() if new == name))


@dataclass
class Parsed:
    """What the events say: first chunk, content chunk times, the final usage/timings, how it ended."""

    ttfr_s: float | None = None
    content_s: list[float] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    finish_reason: str | None = None
    done: bool = False
    malformed: str | None = None


def _has_content(delta: dict[str, Any]) -> bool:
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                or delta.get("tool_calls"))


def parse_events(events: list[tuple[float, bytes]], endpoint: Literal["chat", "completion"]) -> Parsed:
    """Walk the stream once; a line that is not JSON ends the parse with a reason."""
    p = Parsed()
    for t, data in events:
        if p.ttfr_s is None:
            p.ttfr_s = t
        if data == b"[DONE]":
            p.done = True
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            p.malformed = f"malformed SSE line: {data[:80].decode('utf-8', errors='replace')!r}"
            return p
        if not isinstance(obj, dict):
            p.malformed = f"malformed SSE line (not an object): {data[:80].decode('utf-8', errors='replace')!r}"
            return p
        if isinstance(obj.get("timings"), dict):
            p.timings = obj["timings"]
        if endpoint == "chat":
            if isinstance(obj.get("usage"), dict):
                p.usage = obj["usage"]
            for choice in obj.get("choices") or []:
                if _has_content(choice.get("delta") or {}):
                    p.content_s.append(t)
                p.finish_reason = choice.get("finish_reason") or p.finish_reason
        else:
            if obj.get("content"):
                p.content_s.append(t)
            if obj.get("stop"):
                p.done = True
                p.finish_reason = str(obj.get("stop_type") or "stop")
                p.usage = {"prompt_tokens": obj.get("tokens_evaluated"),
                           "completion_tokens": obj.get("tokens_predicted")}
    return p


class RequestSample(Strict):
    """One line of requests.jsonl. Times are ms from the request's send; rates are tok/s."""

    schema_version: Literal["servepack.bench.request/v2", "servepack.bench.request/v1"] = REQUEST_SCHEMA
    context_tokens: int = Field(description="the cell's target prompt tokens")
    concurrency: int
    round: int
    stream: int
    warmup: bool
    nonce: str
    endpoint_prompt_tokens: int = Field(description="prompt tokens the endpoint counts, by /tokenize (or estimate)")
    prompt_sized_exactly: bool
    server_prompt_tokens: int | None = Field(None, description="timings.prompt_n + cache_n, else usage")
    gen_tokens_requested: int
    generated_tokens: int | None
    generated_tokens_source: str
    t_sent_unix: float = Field(description="when the request line went on the wire (t = 0 of every time here)")
    client_queue_ms: float = Field(description="client-side wait before the wire: pool, connect, scheduling")
    resent: bool = Field(False, description="sent again on a new connection: the pooled one closed unanswered")
    ttfr_ms: float | None
    ttft_ms: float | None
    e2e_ms: float | None
    chunk_ms: list[float] = Field(description="arrival of every content chunk (for ITL)")
    itl_ms_median: float | None
    itl_ms_p90: float | None
    itl_ms_max: float | None
    tpot_ms: float | None
    prompt_per_ttft_tok_s_client: float | None = Field(validation_alias=prefill_alias(PROMPT_PER_TTFT),
                                                       description=PREFILL_DEFINITIONS[PROMPT_PER_TTFT])
    prompt_eval_tok_s_server: float | None = Field(validation_alias=prefill_alias(PROMPT_EVAL),
                                                   description=PREFILL_DEFINITIONS[PROMPT_EVAL])
    decode_tok_s_client: float | None
    decode_tok_s_server: float | None
    prefill_gap_pct: float | None = Field(description="(client − server) ÷ server × 100")
    decode_gap_pct: float | None
    timings: dict[str, Any] | None
    usage: dict[str, Any] | None
    finish_reason: str | None
    http_status: int | None
    ok: bool
    failure: str | None
    fresh: bool
    fresh_reason: str
    short_output: bool
    stalled: bool = Field(False, description="cut after no byte for stall_bound_s: never a claim's sample")
    stall_bound_s: float | None = None
    contended: bool | None = Field(None, description="another process held a meaningful share of the host "
                                                     "while this request ran (None: not watched)")
    host: HostReading | None = Field(None, description="the host during this request (contention watch)")
    set_aside: str | None = Field(None, description="why the bench set this sample aside (host contended, "
                                                    "stalled): kept here, in no figure, replaced by another")


def aside_reason(s: RequestSample) -> str | None:
    """Why a measured sample is set aside and replaced (None: it stays): a stall, or a contended host."""
    if s.stalled:
        return s.failure or "stalled"
    if s.contended:
        return f"host contended: {s.host.reason if s.host and s.host.reason else 'see host'}"
    return None


def _cached(timings: dict[str, Any] | None, usage: dict[str, Any] | None) -> int | None:
    if timings and isinstance(timings.get("cache_n"), int):
        return int(timings["cache_n"])
    details = (usage or {}).get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        return int(details["cached_tokens"])
    return None


def _gap(client: float | None, server: float | None) -> float | None:
    return (client - server) / server * 100 if client is not None and server else None


def _num(d: dict[str, Any] | None, key: str) -> float | None:
    v = (d or {}).get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def build_sample(
    ex: StreamExchange, endpoint: Literal["chat", "completion"], *, context_tokens: int, concurrency: int,
    round_: int, stream: int, warmup: bool, nonce: str, endpoint_prompt_tokens: int, exact: bool,
    gen_tokens: int, host: HostReading | None = None,
) -> RequestSample:
    """Derive every glossary metric from one exchange; failures keep whatever timing there was."""
    p = parse_events(ex.events, endpoint)
    timings, usage = p.timings, p.usage
    failure = ex.error or p.malformed
    if failure is None and not p.done:
        failure = "stream ended before its end marker ([DONE] or stop)"
    if failure is None and not p.content_s:
        failure = "no content chunk in the stream"
    ttft = p.content_s[0] if p.content_s else None
    last = p.content_s[-1] if p.content_s else None
    gen: int | None
    if _num(usage, "completion_tokens") is not None:
        gen, source = int(usage["completion_tokens"]), "usage.completion_tokens"  # type: ignore[index]
    elif _num(timings, "predicted_n") is not None:
        gen, source = int(timings["predicted_n"]), "timings.predicted_n"  # type: ignore[index]
    else:
        gen, source = (len(p.content_s) or None), "content chunks (server reported no count)"
    server_prompt: int | None = None
    if timings is not None and _num(timings, "prompt_n") is not None:
        server_prompt = int(timings["prompt_n"]) + int(timings.get("cache_n") or 0)
    elif _num(usage, "prompt_tokens") is not None:
        server_prompt = int(usage["prompt_tokens"])  # type: ignore[index]
    prompt_tokens = server_prompt if server_prompt is not None else endpoint_prompt_tokens
    pre_c = prompt_tokens / ttft if ttft else None
    pre_s = (_num(timings, "prompt_n") or 0) / (_num(timings, "prompt_ms") or 0) * 1000 \
        if _num(timings, "prompt_ms") else None
    dec_c = (gen - 1) / (last - ttft) if gen and gen > 1 and ttft is not None and last and last > ttft else None
    dec_s = _num(timings, "predicted_per_second")
    tpot = (ex.end_s - ttft) * 1000 / (gen - 1) if gen and gen > 1 and ttft is not None and ex.end_s else None
    itl = sorted((b - a) * 1000 for a, b in zip(p.content_s, p.content_s[1:], strict=False))
    cached = _cached(timings, usage)
    as_intended = server_prompt is None or not exact or server_prompt == endpoint_prompt_tokens
    if cached is None:
        fresh, why = False, "server reported no cache counter (timings.cache_n / cached_tokens)"
    elif cached > 0:
        fresh, why = False, f"{cached} prompt tokens reused from the server's cache"
    elif not as_intended:
        fresh, why = False, f"server counted {server_prompt} prompt tokens, {endpoint_prompt_tokens} intended"
    else:
        fresh, why = True, "cache_n == 0" if timings else "cached_tokens == 0"
    ok = failure is None
    return RequestSample(
        context_tokens=context_tokens, concurrency=concurrency, round=round_, stream=stream, warmup=warmup,
        nonce=nonce, endpoint_prompt_tokens=endpoint_prompt_tokens, prompt_sized_exactly=exact,
        server_prompt_tokens=server_prompt, gen_tokens_requested=gen_tokens, generated_tokens=gen,
        generated_tokens_source=source, t_sent_unix=ex.t_sent_unix,
        client_queue_ms=round(ex.queued_s * 1000, 3), resent=ex.resent,
        ttfr_ms=p.ttfr_s * 1000 if p.ttfr_s is not None else None,
        ttft_ms=ttft * 1000 if ttft is not None else None,
        e2e_ms=ex.end_s * 1000 if ex.end_s is not None else None,
        chunk_ms=[round(t * 1000, 3) for t in p.content_s],
        itl_ms_median=quantile(itl, 0.5) if itl else None, itl_ms_p90=quantile(itl, 0.9) if itl else None,
        itl_ms_max=itl[-1] if itl else None, tpot_ms=tpot,
        prompt_per_ttft_tok_s_client=pre_c, prompt_eval_tok_s_server=pre_s, decode_tok_s_client=dec_c,
        decode_tok_s_server=dec_s, prefill_gap_pct=_gap(pre_c, pre_s), decode_gap_pct=_gap(dec_c, dec_s),
        timings=timings, usage=usage, finish_reason=p.finish_reason, http_status=ex.status, ok=ok,
        failure=failure, fresh=fresh and ok, fresh_reason=why if ok else f"failed: {failure}",
        short_output=ok and (gen or 0) < gen_tokens, stalled=ex.stalled, stall_bound_s=ex.stall_bound_s,
        contended=host.contended if host is not None and host.watched else None, host=host,
    )
