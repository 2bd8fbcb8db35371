"""Headless Chromium (Debian's `chromium`) on a file:// page with the network blocked: DOM, console, requests.

The network is blocked three ways: an empty network namespace (`unshare -n`) where that is allowed, a host
resolver that resolves nothing, and a proxy on a closed loopback port. Whatever the page still tries to fetch is
read from Chromium's NetLog: a request whose network isolation key is the file:// page is the page's own (the
browser's background updater requests carry a null key and are not the page's doing).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from system_deps import require

PACKAGE = "chromium"


def chromium_or_skip() -> str:
    """Chromium's path; missing, the test fails under `make test` (which installs it) and skips elsewhere."""
    require("chromium")
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe is not None
    return exe


@cache
def _can_unshare() -> bool:
    exe = shutil.which("unshare")
    if exe is None:
        return False
    return subprocess.run([exe, "-n", "true"], capture_output=True, check=False).returncode == 0


@dataclass
class Load:
    dom: str
    console: list[str]
    page_requests: list[str]
    stderr: str
    screenshot: Path | None


def _argv(exe: str, work: Path, tag: str) -> list[str]:
    prefix = ["unshare", "-n"] if _can_unshare() else []
    return [*prefix, exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-default-apps", "--disable-extensions", "--mute-audio",
            f"--user-data-dir={work / f'profile-{tag}'}", "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=http://127.0.0.1:9", f"--log-net-log={work / f'netlog-{tag}.json'}",
            "--enable-logging=stderr", "--v=0"]


def page_requests(netlog: Path) -> list[str]:
    """URLs the page itself asked for (any scheme but file: and data:), from a NetLog file."""
    text = netlog.read_text(errors="replace").rstrip().rstrip(",")
    if not text.endswith("}"):
        text = text.rstrip("]").rstrip().rstrip(",") + "]}"  # a log Chromium did not finish still parses
    doc = json.loads(text)
    start = doc["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    out = []
    for e in doc.get("events", []):
        p = e.get("params") or {}
        if e.get("type") != start or "url" not in p:
            continue
        mine = "file://" in str(p.get("network_isolation_key", "")) or "site=file://" in str(p.get("site_for_cookies"))
        if mine and not str(p["url"]).startswith(("file:", "data:")):
            out.append(str(p["url"]))
    return out


def load(page: Path, work: Path, *, screenshot: Path | None = None, height: int = 9000) -> Load:
    """Dump the page's DOM (and optionally a full-width screenshot) in headless Chromium, offline."""
    exe = chromium_or_skip()
    work.mkdir(parents=True, exist_ok=True)
    url = page.resolve().as_uri()
    dom = subprocess.run([*_argv(exe, work, "dom"), "--virtual-time-budget=3000", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120, check=False)
    assert dom.returncode == 0, dom.stderr[-2000:]
    err = dom.stderr
    if screenshot is not None:
        shot = subprocess.run([*_argv(exe, work, "shot"), f"--window-size=1280,{height}",
                               f"--screenshot={screenshot}", url], capture_output=True, text=True, timeout=120,
                              check=False)
        assert shot.returncode == 0 and screenshot.is_file(), shot.stderr[-2000:]
        err += shot.stderr
    # The page's console only: Chromium's own internal pages (chrome://) log to the same stream.
    console = [line for line in err.splitlines() if ":CONSOLE" in line and "source: file://" in line]
    requests = page_requests(work / "netlog-dom.json")
    if screenshot is not None:
        requests += page_requests(work / "netlog-shot.json")
    return Load(dom.stdout, console, requests, err, screenshot)


def ink_pixels(png: Path, rgb: tuple[int, int, int], tol: int = 40) -> int:
    """How many pixels of a screenshot are near a colour (the charts' first series colour, say)."""
    from PIL import Image

    data = Image.open(png).convert("RGB").tobytes()
    r0, g0, b0 = rgb
    return sum(1 for i in range(0, len(data), 3)
               if abs(data[i] - r0) <= tol and abs(data[i + 1] - g0) <= tol and abs(data[i + 2] - b0) <= tol)


def distinct_colours(png: Path) -> int:
    from PIL import Image

    im = Image.open(png).convert("RGB")
    colours = im.getcolors(maxcolors=1 << 20)
    return len(colours) if colours else 1 << 20
