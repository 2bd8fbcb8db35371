"""The sample agent client (examples/agent_client.py) against the real embedded model, one small task."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from servepack.engine.base import Endpoint

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_client.py"


@pytest.mark.e2e
def test_agent_client_runs_a_task(embedded_server: Endpoint) -> None:
    task = "Write the word hello into a file named greeting.txt."
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--base-url", embedded_server.base_url, "--max-steps", "2",
         "--max-tokens", "64", task],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    embedded_server.check_alive()
    lines = proc.stdout.splitlines()
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert lines[0] == f"model: {embedded_server.model}"
    assert lines[1].startswith("workspace: ")
    # Every tool call printed is followed by its result; the run ends in an answer or the step limit.
    for i, line in enumerate(lines):
        if line.startswith("tool call: "):
            assert lines[i + 1].startswith("  result: ")
    assert lines[-1].startswith("final answer: " if proc.returncode == 0 else "no final answer after 2 steps")
    assert not Path(lines[1].removeprefix("workspace: ")).exists()
