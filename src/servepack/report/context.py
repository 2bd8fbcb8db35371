"""What every section of the page shares: the group in focus (`Ctx`) and how figures are written."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servepack.records.evidence import Evidence, SettingRow
from servepack.registry.format import LoadedRecord
from servepack.report import plots
from servepack.report.markup import Safe, anchor, esc, num
from servepack.report.sources import Group

# The label MEASURED.md gives a noise-floor row (report.measured.setting_row), word for word.
NOISE_FLOOR = "noise floor — shown, never a headline"
METRIC_LABEL = {"decode_tok_s": "decode tok/s", "prefill_tok_s": "prefill tok/s", "ttft_ms": "TTFT ms"}


@dataclass
class Ctx:
    """What the sections of one group share: the evidence, the runs in focus, the style of each label."""

    group: Group
    gi: int
    records: Sequence[LoadedRecord]
    legend: plots.Legend

    @property
    def ev(self) -> Evidence:
        return self.group.evidence

    @property
    def src(self) -> str:
        return self.ev.pack.claims.headline.source

    def rows(self) -> list[SettingRow]:
        """Bench settings drawn: the run's own (a run DIR), else the binding ones (a results folder)."""
        if self.group.single_run:
            focus = {r.path for r in self.group.focus}
            return [r for r in self.ev.settings if r.run.path in focus]
        return self.ev.current_settings

    def id(self, *parts: object) -> str:
        return anchor(f"g{self.gi}", *parts)


def when(ts: str) -> str:
    return ts[:16].replace("T", " ") + " UTC"


def ci_text(low: float | None, high: float | None, digits: int = 2) -> str:
    return "—" if low is None or high is None else f"{num(low, digits)}–{num(high, digits)}"


def mci(median: float | None, low: float | None, high: float | None, digits: int = 2) -> Safe:
    """A median with its 95% interval under it, small."""
    ci = "" if low is None or high is None else f"<span class='ci'>{esc(ci_text(low, high, digits))}</span>"
    return Safe(f"{esc(num(median, digits))}{ci}")


def row_label(row: SettingRow, with_run: bool = False) -> str:
    preset, gen, conc = row.key
    out = f"{preset} · {gen} gen" + (f" · c{conc}" if conc != 1 else "")
    if row.noise_floor:
        out += " (noise floor)"
    return out + (f" · {row.run.path.name}" if with_run else "")


def figure(svg: str, caption: str) -> str:
    return f'<figure class="chart">{svg}<figcaption>{esc(caption)}</figcaption></figure>'

