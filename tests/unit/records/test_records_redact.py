"""Secret-bearing flags: values redacted in flags and argv (both spellings), the fact one was set kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from servepack.records.redact import (
    REDACTED,
    is_secret_flag,
    redact_argv,
    redact_flags,
    scrub_file,
    scrub_text,
    secret_values,
)


@pytest.mark.parametrize("name", ["api-key", "--api-key", "api_key", "API-KEY", "api-key-file", "ssl-key-file",
                                  "hf-token", "-hft", "token", "password", "auth-secret", "api-keys"])
def test_secret_bearing_flag_names(name: str) -> None:
    assert is_secret_flag(name)


@pytest.mark.parametrize("name", ["ctx-size", "alias", "jinja", "override-kv", "tokenizer", "keep", "n-predict",
                                  "ssl-cert-file", "cache-type-k", "spec-type", "monkey", "image-max-tokens",
                                  "mtmd-batch-max-tokens", "image-min-tokens"])
def test_ordinary_flag_names_are_kept(name: str) -> None:
    assert not is_secret_flag(name)


def test_flags_keep_the_fact_a_secret_was_set() -> None:
    flags = {"api-key": "sk-live-123456", "ctx-size": 512, "jinja": True, "hf-token": "hf_abcdef",
             "override-kv": "tokenizer.ggml.add_bos_token=bool:false", "auth": False}
    assert redact_flags(flags) == {"api-key": REDACTED, "ctx-size": 512, "jinja": True, "hf-token": REDACTED,
                                   "override-kv": "tokenizer.ggml.add_bos_token=bool:false", "auth": False}


def test_argv_both_spellings_and_neighbours_untouched() -> None:
    argv = ["/bin/llama-server", "--model", "m.gguf", "--api-key", "sk-live-123456", "--port", "80",
            "--hf-token=hf_abcdef", "--jinja", "--ssl-key-file", "/k/key.pem", "--alias", "tiny"]
    assert redact_argv(argv) == ["/bin/llama-server", "--model", "m.gguf", "--api-key", REDACTED, "--port", "80",
                                 f"--hf-token={REDACTED}", "--jinja", "--ssl-key-file", REDACTED, "--alias", "tiny"]


def test_argv_without_secrets_is_unchanged() -> None:
    argv = ["/bin/llama-server", "--model", "/m/key.gguf", "--alias", "token-model", "--ctx-size", "512"]
    assert redact_argv(argv) == argv and secret_values(argv) == []


def test_secret_values_read_the_keys_an_api_key_file_holds(tmp_path: Path) -> None:
    keyfile = tmp_path / "keys.txt"
    keyfile.write_text("sk-from-file-1\n\nsk-from-file-2\n")
    found = secret_values(["srv", "--api-key", "sk-a,sk-bbbb", "--api-key-file", str(keyfile)])
    assert {"sk-from-file-1", "sk-from-file-2", "sk-a,sk-bbbb", "sk-bbbb", str(keyfile)} <= set(found)
    assert "sk-a" in found  # four characters: long enough to scrub
    assert scrub_text("key sk-a,sk-bbbb and sk-from-file-2", found) == f"key {REDACTED} and {REDACTED}"


def test_scrub_file_rewrites_a_log_and_leaves_a_clean_one_alone(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("argv: ['--api-key', 'sk-live-123456']\nlistening\n")
    assert scrub_file(log, ["sk-live-123456"]) is True
    assert log.read_text() == f"argv: ['--api-key', '{REDACTED}']\nlistening\n"
    clean = tmp_path / "other.log"
    clean.write_text("listening\n")
    assert scrub_file(clean, ["sk-live-123456"]) is False and clean.read_text() == "listening\n"
