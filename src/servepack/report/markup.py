"""HTML building blocks: every string from a record passes through `esc` before it reaches the page."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

# Inline markdown of MEASURED.md's lines (**bold**, `code`), applied after escaping so it can only add tags.
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")
_ID_SAFE = re.compile(r"[^a-z0-9-]+")


def esc(value: object) -> str:
    """Text for an HTML element or a quoted attribute."""
    return html.escape(str(value), quote=True)


def inline_md(text: str) -> str:
    """A MEASURED.md line as HTML: escaped first, then **bold** and `code` become tags."""
    out = _CODE.sub(r"<code>\1</code>", esc(text))
    return _BOLD.sub(r"<strong>\1</strong>", out)


def anchor(*parts: object) -> str:
    """A stable, attribute-safe id from arbitrary text."""
    slug = _ID_SAFE.sub("-", "-".join(str(p) for p in parts).lower()).strip("-")
    return slug[:80] or "x"


def num(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def table(head: Sequence[str], rows: Iterable[Sequence[object]], *, numeric: Sequence[int] = (),
          caption: str | None = None, cls: str = "data") -> str:
    """A table; cells are escaped unless given as `Safe`; columns in `numeric` align right."""
    body = []
    for row in rows:
        tds = []
        for i, cell in enumerate(row):
            klass = ' class="num"' if i in numeric else ""
            tds.append(f"<td{klass}>{cell.html if isinstance(cell, Safe) else esc(cell)}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    ths = "".join(f'<th{" class=num" if i in numeric else ""}>{esc(h)}</th>' for i, h in enumerate(head))
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (f'<div class="tablewrap"><table class="{cls}">{cap}<thead><tr>{ths}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


class Safe:
    """HTML built by this package from escaped parts; `table` passes it through."""

    __slots__ = ("html",)

    def __init__(self, markup: str) -> None:
        self.html = markup

    def __str__(self) -> str:
        return self.html


def pretty_json(doc: Any, limit: int) -> tuple[str, bool]:
    """Indented JSON cut at `limit` characters; (text, truncated)."""
    try:
        text = json.dumps(doc, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repr(doc)
    return (text, False) if len(text) <= limit else (text[:limit], True)


def note(text: str, kind: str = "missing") -> str:
    """A one-line note (what is missing, why a plot is absent); text is escaped."""
    return f'<p class="note {esc(kind)}">{esc(text)}</p>'
