"""Issue 25 item 7: `servepack pack show` output gets pasted into bug reports, so a preset's secret value is shown as
<redacted> (the file's text, the presets table and --json), whatever its length or TOML spelling; `--reveal-secrets`
prints the file as it is. The wrong answer (before): the pack printed verbatim, keys included."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.redact import REDACTED

LONG = "sk-live-5b1e9c0d7a"
SHORT = "Zq~"  # three characters: by name only
NUMERIC = "9753108"  # a bare TOML integer
LITERAL = "lit-8c0ffee"  # a TOML literal string


def _keyed(pack: Path) -> Path:
    text = pack.read_text().replace("jinja = true\n", f'jinja = true\napi-key = "{LONG}"\n', 1)
    text += (f"[presets.q]\nrole = \"experiment\"\nflags = {{ ctx-size = 256, api-key = '{SHORT}', "
             f"hf-token = {NUMERIC}, no-auth = false }}\n"
             f"[presets.r.flags]\nctx-size = 128\n\"api-key\" = '''{LITERAL}'''\n")
    pack.write_text(text)
    return pack


def _show(*args: str) -> tuple[str, str]:
    r = CliRunner().invoke(cli, ["pack", "show", *args])
    assert r.exit_code == 0, r.output
    return r.stdout, r.stderr


def test_pack_show_redacts_every_key_by_default(tiny_pack: Path) -> None:
    pack = _keyed(tiny_pack)
    out, err = _show(str(pack))
    for value in (LONG, SHORT, NUMERIC, LITERAL):
        assert value not in out + err
    assert f'api-key = "{REDACTED}"\n' in out  # the file's lines, each key in place of its value
    assert f"api-key = '{REDACTED}'" in out and f"hf-token = {REDACTED}," in out
    assert f"\"api-key\" = '''{REDACTED}'''\n" in out
    assert "ctx-size = 512\n" in out and "jinja = true\n" in out and "no-auth = false" in out  # the rest as it is
    assert f"api-key={REDACTED}" in err and "ctx-size=512" in err  # the presets table
    out, err = _show(str(pack), "--json")
    presets = json.loads(out)["presets"]
    assert presets["p"]["flags"] == {"ctx-size": 512, "alias": "tiny", "jinja": True, "api-key": REDACTED}
    assert presets["q"]["flags"] == {"ctx-size": 256, "api-key": REDACTED, "hf-token": REDACTED, "no-auth": False}
    assert presets["r"]["flags"] == {"ctx-size": 128, "api-key": REDACTED}
    for value in (LONG, SHORT, NUMERIC, LITERAL):
        assert value not in out + err


def test_reveal_secrets_prints_the_file_as_it_is(tiny_pack: Path) -> None:
    pack = _keyed(tiny_pack)
    out, err = _show(str(pack), "--reveal-secrets")
    assert pack.read_text() in out + "\n"  # the file, line for line
    assert REDACTED not in out + err and f"api-key={LONG}" in err
    out, _ = _show(str(pack), "--json", "--reveal-secrets")
    presets = json.loads(out)["presets"]
    assert (presets["p"]["flags"]["api-key"], presets["q"]["flags"]["api-key"], presets["q"]["flags"]["hf-token"],
            presets["r"]["flags"]["api-key"]) == (LONG, SHORT, int(NUMERIC), LITERAL)
    r = CliRunner().invoke(cli, ["pack", "show", "--help"])
    assert "--reveal-secrets" in r.output and "<redacted>" in r.output


def test_shipped_packs_are_shown_whole() -> None:
    from servepack.packs import shipped_pack_paths

    for pack_id, path in sorted(shipped_pack_paths().items()):  # no key in them: not a character changed
        out, _ = _show(pack_id)
        assert out.splitlines() == path.read_text().splitlines(), pack_id
