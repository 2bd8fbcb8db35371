"""The hostile-input check of issue 25 item 7: walk every file under a directory, bytes, for a secret in clear."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path


def _pattern(value: str) -> re.Pattern[bytes]:
    """The value as it would be written: as is, or inside a JSON string. A value of digits only must stand alone (no
    digit beside it), so a timing or a byte count that happens to contain it is not taken for it."""
    forms = {value.encode(), json.dumps(value)[1:-1].encode()}
    body = b"|".join(re.escape(f) for f in sorted(forms))
    return re.compile(rb"(?<![0-9])(?:" + body + rb")(?![0-9])" if value.isdigit() else body)


def leaks(root: Path, values: Iterable[str]) -> list[str]:
    """`relative/path: value` for each file under `root` (every file, links not followed) holding a value in clear."""
    patterns = {v: _pattern(v) for v in values}
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [f"{path.relative_to(root)}: {v}" for v, p in patterns.items() if p.search(data)]
    return found
