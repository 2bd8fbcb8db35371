"""Prompts sized to exact server token counts: a unique nonce first, then distinct corpus text."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal, Protocol

import httpx

_MAX_ROUNDS = 12
_SYLLABLES = ("ka", "ve", "ri", "mo", "tu", "sa", "ne", "lo", "qui", "zor", "pel", "dam", "fi", "gu", "bra", "xo")


@cache
def corpus() -> tuple[str, ...]:
    """The shipped passages (bench/corpus/*.txt), each on a different subject, in file-name order."""
    folder = resources.files("servepack.bench").joinpath("corpus")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".txt"))
    return tuple(folder.joinpath(n).read_text(encoding="utf-8").strip() for n in names)


class Tokenizer(Protocol):
    """How the endpoint counts tokens: `exact` is False when the server has no /tokenize."""

    exact: bool

    def tokenize(self, text: str) -> list[int]: ...

    def pieces(self, text: str) -> list[str]: ...

    def wrap(self, body: str) -> str: ...


class ServerTokenizer:
    """llama-server's own /tokenize and /apply-template, so counts are the server's."""

    exact = True

    # The chat template is learned once (the text around a marker) and then applied here, once the server's own
    # /apply-template has agreed with it on `_WRAP_CHECKS` real prompts; a template that does anything but place
    # the content verbatim (trims it, dates the turn) disagrees, and every wrap then goes to the server.
    _MARK = "Zq7servepackTemplateMark9x"
    _WRAP_CHECKS = 2

    def __init__(self, client: httpx.Client, base_url: str, endpoint: Literal["chat", "completion"]) -> None:
        self.client, self.base_url, self.endpoint = client, base_url.rstrip("/"), endpoint
        self._around: tuple[str, str] | None = None
        self._checks = 0
        self._local = True

    def _post(self, path: str, body: dict[str, object]) -> dict[str, object]:
        r = self.client.post(f"{self.base_url}{path}", json=body)
        r.raise_for_status()
        out = r.json()
        assert isinstance(out, dict)
        return out

    def tokenize(self, text: str) -> list[int]:
        out = self._post("/tokenize", {"content": text, "add_special": True, "parse_special": True})
        return [int(t) for t in out["tokens"]]  # type: ignore[attr-defined]

    def pieces(self, text: str) -> list[str]:
        out = self._post("/tokenize", {"content": text, "add_special": False, "with_pieces": True})
        got: list[str] = []
        for item in out["tokens"]:  # type: ignore[attr-defined]
            piece = item["piece"]
            got.append(piece if isinstance(piece, str) else bytes(piece).decode("utf-8", errors="ignore"))
        return got

    def _server_wrap(self, body: str) -> str:
        return str(self._post("/apply-template", {"messages": [{"role": "user", "content": body}]})["prompt"])

    def wrap(self, body: str) -> str:
        if self.endpoint == "completion":
            return body
        if not self._local:
            return self._server_wrap(body)
        if self._around is None:
            probe = self._server_wrap(self._MARK)
            if probe.count(self._MARK) != 1:
                self._local = False
                return self._server_wrap(body)
            head, _, tail = probe.partition(self._MARK)
            self._around = (head, tail)
        local = f"{self._around[0]}{body}{self._around[1]}"
        if self._checks < self._WRAP_CHECKS:
            served = self._server_wrap(body)
            if served != local:
                self._local = False
                return served
            self._checks += 1
        return local


class EstimateTokenizer:
    """For servers without /tokenize: words and punctuation as a rough token count; never exact."""

    exact = False
    _split = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")

    def tokenize(self, text: str) -> list[int]:
        return [hash(m) & 0xFFFF for m in self._split.findall(text)]

    def pieces(self, text: str) -> list[str]:
        return self._split.findall(text)

    def wrap(self, body: str) -> str:
        return body


@dataclass(frozen=True)
class BuiltPrompt:
    """One request's user text and what the endpoint will count for it."""

    body: str
    nonce: str
    target_tokens: int
    endpoint_tokens: int
    exact: bool
    first_passage: int


class PromptBuilder:
    """Builds distinct prompts; measured and warmup prompts start at different passages and nonces."""

    def __init__(self, tokenizer: Tokenizer, *, seed: int | None = None, passages: tuple[str, ...] | None = None):
        self.tok = tokenizer
        self.passages = passages or corpus()
        self.rng = random.Random(seed)
        self._pieces: dict[int, list[str]] = {}
        self._first_pieces: set[str] = set()
        self.count = 0
        self.warmups = 0

    def _passage_pieces(self, i: int) -> list[str]:
        if i not in self._pieces:
            self._pieces[i] = self.tok.pieces(self.passages[i])
        return self._pieces[i]

    def nonce(self) -> str:
        word = "".join(self.rng.choice(_SYLLABLES) for _ in range(3)).capitalize()
        return f"{word}-{self.rng.getrandbits(40):010x}."

    def _stream(self, start: int, skip: int, need: int) -> list[str]:
        """At least `need` pieces of corpus text, passage after passage from `start`, skipping `skip` first."""
        out: list[str] = []
        i = start
        while len(out) < need + skip:
            out += [*self._passage_pieces(i % len(self.passages)), "\n\n"]
            i += 1
        return out[skip:]

    def build(self, target: int, *, warmup: bool = False) -> BuiltPrompt:
        """A prompt whose endpoint token count is `target` when the tokenizer is exact (else the closest)."""
        n = len(self.passages)
        index = self.warmups if warmup else self.count
        if warmup:
            self.warmups += 1
        else:
            self.count += 1
        # Measured prompts open at a passage start (or 37k pieces in); warmups 13 pieces later, so no
        # warmup ever opens with the same text as a measured prompt.
        start = (n // 2 - index) % n if warmup else (index * 7) % n
        skip = (index // n) * 37 + (13 if warmup else 0)
        for _ in range(8):
            nonce = self.nonce()
            # The nonce's first token must be new to this run, so no two prompts open with the same token.
            head = next(iter(self.tok.pieces(nonce)), "")
            if head not in self._first_pieces:
                break
        self._first_pieces.add(head)
        overhead = len(self.tok.tokenize(self.tok.wrap(nonce + " ")))
        pieces = self._stream(start, skip, max(target - overhead, 0) + 64)
        k = max(target - overhead, 0)
        best: tuple[int, int, str] | None = None
        seen: set[int] = set()
        for _ in range(_MAX_ROUNDS):
            k = min(max(k, 0), len(pieces))
            body = f"{nonce} {''.join(pieces[:k]).strip()}"
            got = len(self.tok.tokenize(self.tok.wrap(body)))
            score = abs(got - target) * 2 + (1 if got > target else 0)
            if best is None or score < best[0]:
                best = (score, got, body)
            if got == target or k in seen:
                break
            seen.add(k)
            k += target - got
        assert best is not None
        return BuiltPrompt(body=best[2], nonce=nonce, target_tokens=target, endpoint_tokens=best[1],
                           exact=self.tok.exact, first_passage=start)
