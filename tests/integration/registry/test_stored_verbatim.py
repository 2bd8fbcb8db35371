"""Issue 33 item 1: `registry import` keeps a record's bytes as the file has them, hashed as they are; redaction is
for what servepack shows, and a name merely containing a secret word is no secret.

The wrong answer (before): a name-based rule turned `--long-prefill-token-threshold 1024` into `<redacted>` in an
engine profile, and a `${HF_TOKEN:-}` placeholder too, and the sha256 held was that of the altered bytes."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.redact import REDACTED, holds_secret, redact_argv, redact_document, redact_text

DIGEST = "0a1b2c3d4e5f" + "7" * 52
PROFILE: dict[str, Any] = {  # a vLLM engine profile as the lab writes one (frozen: literal args)
    "id": "vllm-wren-7b-fp8", "engine": "vllm", "about": "Wren-7B FP8 on vLLM (fixture)",
    "image": f"vllm/vllm-openai@sha256:{DIGEST}", "entrypoint": None, "backend": "nvidia", "cards": 1, "port": 8000,
    "args": ["--model", "/models/wren-7b-fp8", "--max-model-len", "32768", "--long-prefill-token-threshold", "1024",
             "--max-num-batched-tokens", "8192", "--max-tokens", "4096"],
    "env": {"HF_TOKEN": "${HF_TOKEN:-}", "VLLM_USE_V1": "1"}, "ctx": 32768, "seqs": 1, "vision": False,
    "config": None, "shm": "8g",
}


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout + result.stderr


@pytest.fixture
def profile_file(tmp_path: Path) -> Path:
    path = tmp_path / "registry" / "engines" / f"{PROFILE['id']}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(PROFILE, indent=2, sort_keys=True) + "\n")
    return path


def test_an_engine_profiles_bytes_and_hash_are_kept_and_nothing_is_redacted(profile_file: Path, tmp_path: Path
                                                                             ) -> None:
    db = tmp_path / "r.sqlite3"
    code, out = _run("registry", "import", str(profile_file), "--db", str(db))
    assert code == 0, out
    assert "secret" not in out and REDACTED not in out
    raw = profile_file.read_bytes()
    with sqlite3.connect(db) as conn:
        held, sha = conn.execute("SELECT bytes, sha256 FROM sources").fetchone()
    assert held == raw and sha == hashlib.sha256(raw).hexdigest()
    code, out = _run("registry", "show", PROFILE["id"], "--db", str(db), "--json")
    assert code == 0, out
    shown = json.loads(out)
    assert shown["registry"]["redacted"] == []
    assert REDACTED not in out and "${HF_TOKEN:-}" in out
    args = shown["record"]["args"]
    assert args[args.index("--long-prefill-token-threshold") + 1] == "1024"
    # the same file again is the same bytes: already present, not a new version
    code, out = _run("registry", "import", str(profile_file), "--db", str(db))
    assert code == 0 and "already present" in out, out


# name, value, secret? — the near-miss table: the word inside a name, a count, a reference to a variable
NAMES = [
    ("--long-prefill-token-threshold", "1024", False),
    ("--max-tokens", "4096", False),
    ("--max-num-batched-tokens", "8192", False),
    ("n_tokens", "12", False),
    ("max_tokens", "512", False),
    ("--token-budget", "900", False),
    ("--key-value-cache", "on-gpu", False),
    ("--auth-type", "bearer", False),
    ("TOKENIZERS_PARALLELISM", "true", False),
    ("HF_TOKEN", "${HF_TOKEN:-}", False),
    ("HF_TOKEN", "$HF_TOKEN", False),
    ("HF_TOKEN", "${HF_TOKEN}", False),
    ("HF_TOKEN", "${HF_TOKEN:-hf_default1}", True),  # a default may be a key
    ("HF_TOKEN", "hf_abc", True),
    ("--api-key", "abc", True),
    ("--api-key-file", "/run/key", True),
    ("--ssl-key-file", "/etc/k.pem", True),
    ("--hf-token", "x", True),
    ("-hft", "x", True),
    ("api_key", "12345", True),
    ("LLAMA_API_KEY", "k1", True),
    ("token", "t", True),
    ("--password", "pw", True),
]


@pytest.mark.parametrize(("name", "value", "secret"), NAMES)
def test_the_near_miss_table(name: str, value: str, secret: bool) -> None:
    assert holds_secret(name, value) is secret
    flag = name if name.startswith("-") else f"--{name}"
    assert (redact_argv(["prog", flag, value])[2] == REDACTED) is secret
    assert (redact_document({name: value})[0][name] == REDACTED) is secret
    assert (REDACTED in redact_text(f"{name}={value}")[0]) is secret
