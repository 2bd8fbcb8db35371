"""Samples stated in registry-style notes, both ways: read ("Decode samples were a, b, and c tok/s; median m.")
into `SampleSet`s with the stated and recomputed median, and written as such a sentence."""

from __future__ import annotations

import re
from dataclasses import dataclass

from servepack.errors import UsageError

_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
_SAMPLES = {
    "decode_tok_s": re.compile(r"decode samples were (?P<list>[^;]+?)(?: tok/s)?; median (?P<median>[\d,.]+)", re.I),
    "ttft_ms": re.compile(r"TTFT samples were (?P<list>[^;]+?)(?: ms)?; median (?P<median>[\d,.]+)", re.I),
    "prefill_tok_s": re.compile(
        r"prefill samples were (?P<list>[^;]+?)(?: prompt tok/s)?; median (?P<median>[\d,.]+)", re.I
    ),
}


def numbers(text: str) -> list[float]:
    """Every number in `text`, reading 10,897.33 as one number."""
    return [float(m.replace(",", "")) for m in _NUMBER.findall(text)]


@dataclass(frozen=True)
class SampleSet:
    """One metric's samples as a note states them, with its stated and its recomputed median."""

    metric: str
    samples: tuple[float, ...]
    stated_median: float
    stated_decimals: int = 2

    @property
    def median(self) -> float:
        import statistics  # with its fractions and decimal, only when a median is taken: reading records needs none

        return statistics.median(self.samples)

    @property
    def consistent(self) -> bool:
        """The stated median matches the samples to the note's own rounding."""
        return bool(abs(self.median - self.stated_median) <= 0.5 * 10.0**-self.stated_decimals + 1e-9)


NOTES_FORM = 'notes state samples as "Decode samples were 19.2, 19.3, and 19.4 tok/s; median 19.3."'


def parse_notes(notes: str) -> list[SampleSet]:
    """Samples stated in registry-style notes ("Decode samples were a, b, and c tok/s; median m.").

    A sentence of that form whose samples or median are not numbers raises UsageError quoting it.
    """
    found = []
    for metric, pattern in _SAMPLES.items():
        for m in pattern.finditer(notes):
            stated = m.group("median").rstrip(".")
            samples = numbers(m.group("list"))
            if not samples or not _NUMBER.fullmatch(stated):
                what = "samples in {!r} are not numbers" if not samples else "median in {!r} is not a number"
                raise UsageError(f"{metric}: the {what.format(m.group(0)[:120])}; {NOTES_FORM}")
            decimals = len(stated.split(".")[1]) if "." in stated else 0
            found.append(SampleSet(metric, tuple(samples), numbers(stated)[0], decimals))
    return found


def _fmt(values: list[float], digits: int) -> str:
    parts = [f"{v:,.{digits}f}" for v in values]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f", and {parts[-1]}"


def sample_sentence(label: str, values: list[float], unit: str, digits: int = 2) -> str | None:
    """"Decode samples were a, b, and c tok/s; median m." with the median of the values as listed."""
    if not values:
        return None
    import statistics

    listed = [round(v, digits) for v in values]
    return f"{label} samples were {_fmt(listed, digits)} {unit}; median {statistics.median(listed):,.{digits}f}."
