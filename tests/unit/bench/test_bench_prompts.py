"""Prompt sizing with a fake tokenizer: exact counts, distinct openings, warmups apart."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import httpx

from servepack.bench.prompts import BuiltPrompt, PromptBuilder, ServerTokenizer, corpus

_SPLIT = re.compile(r"\s*\S+|\s+")


class FakeTokenizer:
    """Words are tokens; the chat wrapper adds 5; a double space merges into the next word (non-additive)."""

    exact = True

    def tokenize(self, text: str) -> list[int]:
        return list(range(len(_SPLIT.findall(text))))

    def pieces(self, text: str) -> list[str]:
        return _SPLIT.findall(text)

    def wrap(self, body: str) -> str:
        return f"<s> [user] {body} [/user] <a>"


def test_corpus_is_shipped_and_varied() -> None:
    texts = corpus()
    assert len(texts) >= 25
    assert len({t[:40] for t in texts}) == len(texts)
    assert all(len(t.split()) > 200 for t in texts)


def test_exact_sizes_for_many_targets() -> None:
    b = PromptBuilder(FakeTokenizer(), seed=1)
    for target in (32, 256, 1000, 4096, 20000):
        p = b.build(target)
        assert p.endpoint_tokens == target
        assert len(FakeTokenizer().tokenize(FakeTokenizer().wrap(p.body))) == target


def test_nonce_first_and_unique_openings() -> None:
    b = PromptBuilder(FakeTokenizer(), seed=2)
    built: list[BuiltPrompt] = [b.build(300) for _ in range(30)]
    assert all(p.body.startswith(p.nonce) for p in built)
    assert len({p.nonce for p in built}) == 30
    assert len({p.body.split()[0] for p in built}) == 30
    starts = [p.first_passage for p in built[:25]]
    assert len(set(starts)) == 25


def test_warmups_start_elsewhere() -> None:
    b = PromptBuilder(FakeTokenizer(), seed=3)
    warm = [b.build(200, warmup=True) for _ in range(3)]
    measured = [b.build(200) for _ in range(3)]
    second_words = {" ".join(p.body.split()[1:6]) for p in measured}
    assert all(" ".join(w.body.split()[1:6]) not in second_words for w in warm)


def test_unreachable_target_reports_closest() -> None:
    b = PromptBuilder(FakeTokenizer(), seed=4)
    p = b.build(3)
    assert p.endpoint_tokens != 3 and p.endpoint_tokens >= 3


# -- the server's chat template, learned once ------------------------------------------------------------------


def _template_server(render: Callable[[str], str]) -> tuple[httpx.Client, list[str]]:
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        content = json.loads(request.content)["messages"][0]["content"]
        return httpx.Response(200, json={"prompt": render(content)})

    return httpx.Client(transport=httpx.MockTransport(handle)), calls


def test_a_verbatim_chat_template_is_applied_locally_after_the_server_agrees_twice() -> None:
    client, calls = _template_server(lambda c: f"<|user|>\n{c}\n<|assistant|>\n")
    tok = ServerTokenizer(client, "http://127.0.0.1:1", "chat")
    bodies = [f"prompt {i} text" for i in range(10)]
    assert [tok.wrap(b) for b in bodies] == [f"<|user|>\n{b}\n<|assistant|>\n" for b in bodies]
    assert len(calls) == 3  # the marker, then two real prompts checked; the other eight were wrapped here


def test_a_template_that_changes_the_content_is_always_asked() -> None:
    # A template that trims the content: the local wrap would keep the spaces, so the server is asked every time
    client, calls = _template_server(lambda c: f"[user] {c.strip()} [bot]")
    tok = ServerTokenizer(client, "http://127.0.0.1:1", "chat")
    assert tok.wrap("  padded  ") == "[user] padded [bot]"
    assert [tok.wrap(f" p{i} ") for i in range(4)] == [f"[user] p{i} [bot]" for i in range(4)]
    assert len(calls) == 1 + 1 + 4  # marker, the first (disagreeing) check, then every wrap from the server
