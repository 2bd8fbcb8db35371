"""The one reader of a server's Prometheus text (`/metrics`, the text exposition format): its samples (`samples`),
by series as the bench diffs them (`by_series`) and summed over label sets as the at-rest checks read them
(`summed`).

A sample line is `name{labels} value [timestamp]`: the name as Prometheus spells one (`[A-Za-z_:][A-Za-z0-9_:]*`),
the label set optional (`{label="value",...}`) and kept as written (a quoted value may hold `}`, `,` or an escaped
quote), then the value. Skipped: comments (`# HELP`, `# TYPE`), blank lines, a line that is no sample (no value, a
value that is no number, no name, a label set left open, a label value not quoted, two labels without a comma), and
a value that is not finite (NaN, +Inf, -Inf: no count or gauge servepack reads is one).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

# name, then the label set ({} or `label="value"` pairs, a comma between and perhaps after), then the value
_LABELS = r'\{\s*(?:[A-Za-z_]\w*\s*=\s*"(?:[^"\\]|\\.)*"\s*(?:,\s*|(?=\})))*\}'
_SAMPLE = re.compile(rf"([A-Za-z_:][\w:]*)({_LABELS})?\s+(\S+)")


@dataclass(frozen=True)
class Sample:
    name: str
    labels: str  # the label set as written, braces included; "" when the line has none
    value: float


def samples(text: str) -> Iterator[Sample]:
    """Every sample line of `text` with a finite value, in order (see the module's docstring for what is skipped)."""
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            yield Sample(m.group(1), m.group(2) or "", value)


def by_series(text: str) -> dict[str, float]:
    """Series (the name and its label set as written: `llamacpp:tokens_predicted_total`, `m{slot="0"}`) → value;
    a series written twice keeps its last value."""
    return {s.name + s.labels: s.value for s in samples(text)}


def summed(text: str) -> dict[str, float]:
    """Metric name → the sum of its samples over every label set (vLLM's `num_requests_running` per model)."""
    out: dict[str, float] = {}
    for s in samples(text):
        out[s.name] = out.get(s.name, 0.0) + s.value
    return out
