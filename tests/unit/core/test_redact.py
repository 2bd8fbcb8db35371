"""Secret-bearing flags: values redacted in flags and argv (both spellings), the fact one was set kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from servepack.redact import (
    REDACTED,
    holds_secret,
    is_secret_flag,
    is_switch,
    redact_argv,
    redact_flags,
    redact_text,
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


def test_scrub_file_interrupted_leaves_the_log_whole_and_no_temp(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the scrubbed copy is put in place: the interrupt goes on, the log is as it was (not half
    rewritten), and no temp file is left beside it."""
    def interrupted(*a: object, **k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("servepack.safepath.os.replace", interrupted)
    log = tmp_path / "server.log"
    log.write_text("key sk-live-123456\n")
    with pytest.raises(KeyboardInterrupt):
        scrub_file(log, ["sk-live-123456"])
    assert log.read_text() == "key sk-live-123456\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["server.log"]


# Issue 25 item 7: by name, whatever the length or type; switches are not secrets.

@pytest.mark.parametrize("value", ["Zq~", "x", "9753108", "sk-a"])
def test_a_short_or_numeric_value_is_redacted_by_its_name(value: str) -> None:
    assert redact_flags({"api-key": value, "threads": 4}) == {"api-key": REDACTED, "threads": 4}
    assert redact_flags({"api-key": int(value)} if value.isdigit() else {}) == (
        {"api-key": REDACTED} if value.isdigit() else {})
    assert redact_argv(["srv", "--api-key", value, f"--hf-token={value}", "-t", "4"]) == [
        "srv", "--api-key", REDACTED, f"--hf-token={REDACTED}", "-t", "4"]


def test_numbers_are_secrets_too_but_switches_are_not() -> None:
    flags = {"api-key": 12345, "hf-token": 0, "auth": True, "password": 1.0, "token": "off"}
    assert redact_flags(flags) == {"api-key": REDACTED, "hf-token": 0, "auth": True, "password": 1.0, "token": "off"}


@pytest.mark.parametrize("value", ["1", "0", "true", "FALSE", "yes", "No", "on", "off", "", '"1"', "bool:false"])
def test_switch_values_are_kept_whatever_the_name(value: str) -> None:
    assert is_switch(value)
    assert not holds_secret("HF_HUB_DISABLE_IMPLICIT_TOKEN", value)
    assert redact_text(f"HF_HUB_DISABLE_IMPLICIT_TOKEN={value} x")[0] == f"HF_HUB_DISABLE_IMPLICIT_TOKEN={value} x"


@pytest.mark.parametrize("value", ["abc", "2", "12345", "truthy", "sk-1"])
def test_anything_else_under_a_secret_name_is_a_secret(value: str) -> None:
    assert holds_secret("HF_HUB_DISABLE_IMPLICIT_TOKEN", value) and holds_secret("api_key", value)


def test_the_environment_record_keeps_a_switch_and_hides_a_key() -> None:
    from servepack.records.receipt import engine_environment

    env = {"HF_HUB_DISABLE_IMPLICIT_TOKEN": "1", "HF_TOKEN": "Zq~", "LLAMA_API_KEY": "12345", "HF_HUBTOKEN": "abc",
           "HF_HUB_OFFLINE": "1", "GGML_SCHED_MAX_COPIES": "4", "PATH": "/bin", "SERVEPACK_APIKEY": "s3"}
    assert engine_environment(env) == {"GGML_SCHED_MAX_COPIES": "4", "HF_HUBTOKEN": REDACTED,
                                       "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1", "HF_HUB_OFFLINE": "1",
                                       "HF_TOKEN": REDACTED, "LLAMA_API_KEY": REDACTED,
                                       "SERVEPACK_APIKEY": REDACTED}


@pytest.mark.parametrize(("text", "clean"), [
    ("llama-server --api-key Zq~ --port 8080", f"llama-server --api-key {REDACTED} --port 8080"),
    ("llama-server --api-key=Zq~ --port 8080", f"llama-server --api-key={REDACTED} --port 8080"),
    ('run --api-key "a b" -c 4', f'run --api-key "{REDACTED}" -c 4'),
    ("docker run -e LLAMA_API_KEY=Zq~ -e HF_HUB_OFFLINE=1 img", f"docker run -e LLAMA_API_KEY={REDACTED} "
     "-e HF_HUB_OFFLINE=1 img"),
    ("argv: ['--model', 'm.gguf', '--api-key', 'Zq~', '--jinja']",
     f"argv: ['--model', 'm.gguf', '--api-key', '{REDACTED}', '--jinja']"),
    ("non-default args: {'model': 'm', 'api_key': ['Zq~', 'k2'], 'port': 8000}",
     f"non-default args: {{'model': 'm', 'api_key': ['{REDACTED}', '{REDACTED}'], 'port': 8000}}"),
    ('{"api_key": "Zq~", "hf_token": 9753108, "ctx": 512}',
     f'{{"api_key": "{REDACTED}", "hf_token": {REDACTED}, "ctx": 512}}'),
    ("Namespace(api_key='Zq~', port=8000)", f"Namespace(api_key='{REDACTED}', port=8000)"),
    ("GET /v1/models?api_key=Zq~&x=1", f"GET /v1/models?api_key={REDACTED}&x=1"),
    ("--override-kv tokenizer.ggml.add_bos_token=bool:false --api-key", "--override-kv "
     "tokenizer.ggml.add_bos_token=bool:false --api-key"),
    ("--api-key --port 80", "--api-key --port 80"),
    ("'--api-key', '--port'", "'--api-key', '--port'"),
    ("n_ctx = 512, n_tokens=12 max_tokens: 5", "n_ctx = 512, n_tokens=12 max_tokens: 5"),
])
def test_text_by_name_every_spelling(text: str, clean: str) -> None:
    assert redact_text(text)[0] == clean
    assert scrub_text(text, []) == clean


def test_a_short_key_leaves_a_log_by_name_and_a_disk_full_rewrite_masks_it_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"fake llama-server argv: ['--api-key', 'Zq~']\n\xff\xfe raw bytes kept\n")
    assert scrub_file(log, []) is True
    assert log.read_bytes() == f"fake llama-server argv: ['--api-key', '{REDACTED}']\n".encode() + \
        b"\xff\xfe raw bytes kept\n"
    log.write_bytes(b"--api-key=Zq~ and sk-long-value-1 here\n")

    def full(*a: object, **k: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("servepack.safepath.os.replace", full)  # the rename of the one atomic replace
    assert scrub_file(log, ["sk-long-value-1"]) is True
    assert log.read_bytes() == b"--api-key=*** and *************** here\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["server.log"]  # no temp file left


def test_a_flag_after_a_flag_without_value_is_seen() -> None:
    assert redact_text("srv --jinja --api-key Zq~ --jinja --hf-token=x")[0] == \
        f"srv --jinja --api-key {REDACTED} --jinja --hf-token={REDACTED}"
    assert redact_text("['--jinja', '--api-key', 'Zq~']")[0] == f"['--jinja', '--api-key', '{REDACTED}']"


def test_a_record_keeps_switches_and_figures_and_hides_keys_of_any_length() -> None:
    from servepack.redact import document_secrets, redact_document, scrub_message

    doc = {"env": {"HF_HUB_DISABLE_IMPLICIT_TOKEN": "1", "HF_TOKEN": "Zq~", "VLLM_API_KEY": "true"},
           "container_env": [{"name": "OPENAI_API_KEY", "value": "x"}, {"name": "NO_AUTH", "value": "on"}],
           "rows": [{"time_per_output_token_ms": 12.5, "output_tokens": 8}],
           "arguments": ["--api-key", "k", "--hf-token=0", "--port", "8080"],
           "command": "HF_HUB_DISABLE_IMPLICIT_TOKEN=1 LLAMA_API_KEY=ab9 llama-server"}
    clean, places = redact_document(doc)
    assert clean == {"env": {"HF_HUB_DISABLE_IMPLICIT_TOKEN": "1", "HF_TOKEN": REDACTED, "VLLM_API_KEY": "true"},
                     "container_env": [{"name": "OPENAI_API_KEY", "value": REDACTED},
                                       {"name": "NO_AUTH", "value": "on"}],
                     "rows": [{"time_per_output_token_ms": 12.5, "output_tokens": 8}],
                     "arguments": ["--api-key", REDACTED, "--hf-token=0", "--port", "8080"],
                     "command": f"HF_HUB_DISABLE_IMPLICIT_TOKEN=1 LLAMA_API_KEY={REDACTED} llama-server"}
    assert sorted(places) == ["arguments[1] (--api-key)", "command (LLAMA_API_KEY)",
                              "container_env[0].value (OPENAI_API_KEY)", "env.HF_TOKEN (HF_TOKEN)"]
    assert sorted(document_secrets(doc)) == ["Zq~", "ab9", "k", "x"]
    assert scrub_message("launch: 'k' and {'x': 1} and Zq~, not kin", document_secrets(doc)) == \
        f"launch: '{REDACTED}' and {{'{REDACTED}': 1}} and {REDACTED}, not kin"


# Issue 25 item 7, second round: YAML `name: value` lines (a lab engine profile's config) and TOML `name = value`
# pairs (a pack), by name, whatever the length; a count (`tokens`) and a switch are kept.

R = REDACTED


@pytest.mark.parametrize(("text", "clean"), [
    ("admin_key: sk-abc123\nport: 5000\n", f"admin_key: {R}\nport: 5000\n"),
    ("  api_key: x  # the lab's\n", f"  api_key: {R}  # the lab's\n"),
    ("- token: 9753108\n", f"- token: {R}\n"),
    ('password: "a b"\n', f'password: "{R}"\n'),
    ("secret: correct horse, battery\n", f"secret: {R}\n"),
    ('"api_key": abc,\n', f'"api_key": {R},\n'),
    ("api_keys: [a, 'b c']\n", f"api_keys: [{R}, '{R}']\n"),
    ("password: |\n  one\n\n  two\nport: 1\n", f"password: |\n  {R}\n\n  {R}\nport: 1\n"),
    ("config: ['model:', 'admin_key: sk-abc']", f"config: ['model:', 'admin_key: {R}']"),
    ("draft: {token: abc, x: 1}", f"draft: {{token: {R}, x: 1}}"),
    ('api-key = "sk-1"\nctx-size = 8192\n', f'api-key = "{R}"\nctx-size = 8192\n'),
    ('"hf-token" = 12345\n', f'"hf-token" = {R}\n'),
    ("presets.p.flags.api-key = '''zz'''\n", f"presets.p.flags.api-key = '''{R}'''\n"),
    ("flags = { api-key = 'abc', ctx-size = 8 }\n", f"flags = {{ api-key = '{R}', ctx-size = 8 }}\n"),
    ('api-key = """\nmulti"""\n', f'api-key = """{R}"""\n'),
])
def test_yaml_and_toml_lines_by_name(text: str, clean: str) -> None:
    assert redact_text(text)[0] == clean
    assert scrub_text(text, []) == clean


@pytest.mark.parametrize("text", [
    "tokens: 512\nmax_tokens: 512\ncache_tokens: 66560\n",  # counts
    "disable_auth: false\nauth: on\napi_key: null\ntoken: ~\nkeys:\n  - name: a\n",  # switches, no value, a mapping
    "auth:\n  user: bob\n",
    "no joules per output token: 1.5 J\nthe key: is not at a line's start\n",  # prose: a name inside a sentence
    "ctx-size = 8192\nno-auth = false\nHF_HUB_DISABLE_IMPLICIT_TOKEN= x\nif token == 3\n",
    "print_info: EOS token        = 2 '</s>'\n",  # an engine's log line
])
def test_yaml_and_toml_lines_that_hold_no_secret_are_kept(text: str) -> None:
    assert redact_text(text) == (text, [])


def test_a_config_list_is_read_as_one_text() -> None:
    from servepack.redact import document_secrets, redact_document

    doc = {"config": ["network:", "  admin_key: sk-a1", "  tokens: 512", "  password: |", "    pw-1", "port: 1"]}
    clean, places = redact_document(doc)
    assert clean == {"config": ["network:", f"  admin_key: {R}", "  tokens: 512", "  password: |", f"    {R}",
                                "port: 1"]}
    assert places == ["config[1] (admin_key)", "config[4] (password)"]
    assert document_secrets(doc) == ["sk-a1", "pw-1"]


def test_an_error_shown_loses_the_registered_values_and_named_ones() -> None:
    from servepack.redact import scrub_shown
    from servepack.store import register_secrets, registered_secrets

    register_secrets(["Ux-31ab", "q7"])  # seven characters: kept from files by name only, from a message by value
    assert "Ux-31ab" in registered_secrets(4) and "Ux-31ab" not in registered_secrets()
    assert scrub_shown("key Ux-31ab; argv ['--api-key', 'q7']") == f"key {R}; argv ['--api-key', '{R}']"
    assert scrub_shown("key Ux-31ab; --api-key q7", by_name=False) == f"key {R}; --api-key q7"
    assert scrub_shown("q7 alone") == "q7 alone"  # two characters: never removed by value
