"""Prompt sizing with a fake tokenizer: exact counts, distinct openings, warmups apart."""

from __future__ import annotations

import re

from servepack.bench.prompts import BuiltPrompt, PromptBuilder, corpus

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
