"""A record's tokenized llama.cpp launch as a local preset: what passes, what is rewritten, what is dropped.

One flag table per tool (`TOOLS`: llama-server, llama-bench, llama-cli), each with that tool's own short names and
meanings: `-r 5` is llama-bench's repetitions (the samples per test), llama-server's and llama-cli's reverse
prompt; `-p 512,2048` is llama-bench's prompt sizes, llama-cli's prompt text. A tool's settings of the server
(layers, batch, cache types, ...) become the llama-server flags of the same setting; what only describes the
measurement (llama-bench's -p/-n/-r/-d) becomes the protocol (`Translation.bench`), each listed.

The engine seam owns the binary, the model path, the bind address and the port (`engine.llamacpp` adds them to
every launch), so those are rewritten, never passed. Flags that name files or services of the recorded host are
dropped and listed; a dropped flag that changes what is measured (an adapter, a draft model, RPC workers) makes
the comparison NOT_COMPARABLE. Every other flag passes by its long name, as recorded; one servepack does not know
passes too, listed, and the local llama-server decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Literal

from pydantic import ValidationError

from servepack.errors import UsageError
from servepack.packs import flag_policy
from servepack.packs.flag_policy import family_of
from servepack.packs.schema import FlagValue, Preset
from servepack.redact import holds_secret
from servepack.store import REDACTED

Action = Literal["rewritten", "dropped", "normalized", "passed-unknown", "protocol"]

# llama-server's table. Its short and alternative names → its long name (as `llama-server --help` lists them).
ALIASES: dict[str, str] = {
    "t": "threads", "tb": "threads-batch", "C": "cpu-mask", "Cr": "cpu-range", "Cb": "cpu-mask-batch",
    "Crb": "cpu-range-batch", "c": "ctx-size", "n": "n-predict", "predict": "n-predict", "b": "batch-size",
    "ub": "ubatch-size", "fa": "flash-attn", "kvo": "kv-offload", "nkvo": "no-kv-offload", "ctk": "cache-type-k",
    "ctv": "cache-type-v", "dt": "defrag-thold", "lm": "load-mode", "lzm": "lazy-mode", "dev": "device",
    "ot": "override-tensor", "cmoe": "cpu-moe", "ncmoe": "n-cpu-moe", "ncffn": "n-cpu-ffn", "ngl": "n-gpu-layers",
    "gpu-layers": "n-gpu-layers", "sm": "split-mode", "ts": "tensor-split", "mg": "main-gpu", "fitt": "fit-target",
    "fitc": "fit-ctx", "m": "model", "mu": "model-url", "dr": "docker-repo", "hf": "hf-repo", "hfr": "hf-repo",
    "hff": "hf-file", "hft": "hf-token", "v": "verbose", "log-verbose": "verbose", "lv": "verbosity",
    "log-verbosity": "verbosity", "s": "seed", "np": "parallel", "cb": "cont-batching", "nocb": "no-cont-batching",
    "mm": "mmproj", "mmu": "mmproj-url", "a": "alias", "md": "model-draft", "ngld": "n-gpu-layers-draft",
    "gpu-layers-draft": "n-gpu-layers-draft", "cd": "ctx-size-draft", "ctxcp": "ctx-checkpoints",
    "cram": "cache-ram", "kvu": "kv-unified", "no-kvu": "no-kv-unified", "lcs": "lookup-cache-static",
    "lcd": "lookup-cache-dynamic", "jf": "json-schema-file", "j": "json-schema", "hfd": "hf-repo-draft",
    "hfrd": "hf-repo-draft", "to": "timeout", "sps": "slot-prompt-similarity", "rea": "reasoning", "ag": "agent",
    "no-ag": "no-agent", "cms": "checkpoint-min-step", "r": "reverse-prompt", "sp": "special", "l": "logit-bias",
    "bs": "backend-sampling", "e": "escape", "nr": "no-repack", "embeddings": "embedding",
    "reranking": "rerank", "temp": "temperature",
}

# Flags that never take a value (a following token is the next flag).
BOOLEAN = frozenset("""
metrics jinja no-jinja props slots no-slots cont-batching no-cont-batching mmap no-mmap mlock warmup no-warmup
kv-offload no-kv-offload verbose log-disable offline swa-full no-host cpu-moe check-tensors op-offload
no-op-offload embedding rerank kv-unified no-kv-unified context-shift no-context-shift cache-prompt
no-cache-prompt special perf no-perf escape no-escape reuse-port webui no-webui repack no-repack
backend-sampling ignore-eos spm-infill no-mmproj mmproj-auto no-mmproj-auto mmproj-offload no-mmproj-offload
prefill-assistant no-prefill-assistant list-devices version help completion-bash lora-init-without-apply
log-jsonl no-log-jsonl log-prefix no-log-prefix log-timestamps no-log-timestamps cache-idle-slots
no-cache-idle-slots models-autoload no-models-autoload reasoning-preserve no-reasoning-preserve
skip-chat-parsing no-skip-chat-parsing cors-credentials no-cors-credentials agent no-agent ui-mcp-proxy
webui-mcp-proxy no-ui-mcp-proxy no-webui-mcp-proxy spec-default cpu-moe-draft
""".split())

# Flags servepack knows llama-server to take and passes unchanged (beside BOOLEAN and the prefixes below).
KNOWN = frozenset("""
threads threads-batch cpu-mask cpu-range cpu-strict prio poll cpu-mask-batch cpu-range-batch cpu-strict-batch
prio-batch poll-batch ctx-size n-predict batch-size ubatch-size keep flash-attn cache-type-k cache-type-v
defrag-thold load-mode lazy-mode numa device override-tensor n-cpu-moe n-cpu-ffn n-gpu-layers split-mode
tensor-split main-gpu fit fit-target fit-ctx override-kv verbosity log-colors seed samplers sampler-seq
sampling-seq temperature top-k top-p min-p top-nsigma typical repeat-last-n repeat-penalty presence-penalty
frequency-penalty adaptive-target adaptive-decay dynatemp-range dynatemp-exp grammar json-schema logit-bias
ctx-checkpoints swa-checkpoints checkpoint-min-step cache-ram kv-unified-per-slot parallel alias tags timeout
threads-http sse-ping-interval cache-reuse reasoning-format reasoning reasoning-effort reasoning-budget
reasoning-budget-message chat-template chat-template-kwargs slot-prompt-similarity sleep-idle-seconds pooling
ctx-size-draft n-gpu-layers-draft cache-type-k-draft cache-type-v-draft threads-draft threads-batch-draft
draft draft-n draft-max draft-min draft-n-min draft-p-split draft-p-min device-draft override-tensor-draft
n-cpu-moe-draft models-max image-min-tokens image-max-tokens mtmd-batch-max-tokens video-fps
video-timestamp-interval embd-normalize reverse-prompt cors-origins cors-methods cors-headers mmproj-device
ui-config webui-config
""".split())
KNOWN_PREFIXES = ("spec-", "rope-", "yarn-", "dry-", "xtc-", "mirostat")
TWO_VALUES = frozenset({"control-vector-layer-range"})
# Flags llama-server applies once per occurrence: a second, different value cannot pass in a preset.
REPEATABLE = frozenset({"override-tensor", "override-tensor-draft", "override-kv", "reverse-prompt", "logit-bias"})

# The engine seam sets these on every launch.
ENGINE_OWNED = {
    "model": "the local model file",
    "host": "127.0.0.1 (servepack serves on loopback only)",
    "port": "a free loopback port chosen at launch",
}
# Dropped: where the weights would come from (the flag policy's model sources and model presets, which it refuses
# in a pack whatever the opt-ins), and the token for downloading them; the local file replaces them.
MODEL_SOURCES = frozenset({*flag_policy.MODEL_SOURCES.values(), "hf-token"})
# Dropped without changing what is measured: files, services and listeners of the recorded host.
NEUTRAL_DROPS: dict[str, str] = {
    "log-file": "servepack writes the server's log into the results directory",
    "log-disable": "servepack keeps the server's log",
    "slot-save-path": "a directory of the recorded host; saving slots is not part of the protocol",
    "path": "static files of the recorded host; the bench uses the API only",
    "api-key": "the record's launch needed an API key (its value is never kept: give your own key yourself when you "
               "launch it); the bench sends none",
    "api-key-file": "the record's launch needed an API key file of the recorded host (give your own key yourself "
                    "when you launch it); the bench sends none",
    "ssl-key-file": "the bench speaks plain HTTP on loopback",
    "ssl-cert-file": "the bench speaks plain HTTP on loopback",
    "api-prefix": "the bench uses llama-server's own paths",
    "media-path": "a directory of the recorded host", "models-dir": "a directory of the recorded host",
    "models-preset": "a file of the recorded host", "log-prompts-dir": "a directory of the recorded host",
    "ui-config-file": "a file of the recorded host", "webui-config-file": "a file of the recorded host",
    "video-ffmpeg-dir": "a directory of the recorded host",
    "mmproj": "a vision projector on the recorded host; the protocol's prompts are text",
    "mmproj-url": "a vision projector download; the protocol's prompts are text",
    "tools": "lets the server run tools; not needed to measure",
    "mcp-servers-config": "lets the server reach MCP servers; not needed to measure",
    "mcp-servers-json": "lets the server reach MCP servers; not needed to measure",
    "agent": "a CORS proxy and server tools; not needed to measure",
    "ui-mcp-proxy": "an MCP proxy; not needed to measure", "webui-mcp-proxy": "an MCP proxy; not needed to measure",
    "list-devices": "prints and exits: the server would never serve", "version": "prints and exits",
    "help": "prints and exits", "completion-bash": "prints and exits",
    "reuse-port": "the port is servepack's own",
}
# Dropped, and the comparison is NOT_COMPARABLE: without them the local server computes something else.
AFFECTING_DROPS: dict[str, str] = {
    "lora": "a LoRA adapter on the recorded host's disk",
    "lora-scaled": "a LoRA adapter on the recorded host's disk",
    "control-vector": "a control vector on the recorded host's disk",
    "control-vector-scaled": "a control vector on the recorded host's disk",
    "control-vector-layer-range": "applies the recorded host's control vector",
    "model-draft": "a draft model on the recorded host's disk (speculative decoding changes decode speed)",
    "spec-draft-model": "a draft model on the recorded host's disk (speculative decoding changes decode speed)",
    "hf-repo-draft": "a draft model download (speculative decoding changes decode speed)",
    "spec-draft-hf": "a draft model download (speculative decoding changes decode speed)",
    "rpc": "compute on other machines (RPC workers); servepack sends nothing off loopback",
    "lookup-cache-static": "a lookup cache on the recorded host's disk (changes speculative decoding)",
    "lookup-cache-dynamic": "a lookup cache on the recorded host's disk (changes speculative decoding)",
    "chat-template-file": "a chat template on the recorded host's disk (changes the prompts' tokens)",
    "grammar-file": "a grammar on the recorded host's disk (constrained decoding changes decode speed)",
    "json-schema-file": "a JSON schema on the recorded host's disk (constrained decoding changes decode speed)",
}
_NAME = re.compile(r"[a-z][a-z0-9-]*")
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


@dataclass(frozen=True)
class Rewrite:
    """One recorded token (with its value) that did not pass unchanged, and why."""

    flag: str
    recorded: str | None
    action: Action
    local: str | None
    reason: str
    changes_measurement: bool = False

    def line(self) -> str:
        given = f"{self.flag} {self.recorded}" if self.recorded is not None else self.flag
        to = f" → {self.local}" if self.local is not None else ""
        return f"{self.action}: {given}{to} ({self.reason})"


@dataclass(frozen=True)
class Translation:
    """A record's launch as local flags: the preset the engine serves, and every rewrite, listed."""

    source: str
    recorded_argv: tuple[str, ...]
    binary: str | None
    flags: dict[str, FlagValue]
    rewrites: tuple[Rewrite, ...]
    tool: str = "llama-server"
    # llama-bench's measurement, by its long names: n-prompt, n-gen, n-depth (lists of tokens), repetitions ([n])
    bench: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def blockers(self) -> list[str]:
        """Rewrites that change what is measured: each makes the comparison NOT_COMPARABLE."""
        return [f"the record's launch used {r.flag}"
                + (f" {r.recorded}" if r.recorded is not None else "") + f", dropped here: {r.reason}"
                for r in self.rewrites if r.changes_measurement]

    def localized(self, *, binary: str | None, model: str | None) -> Translation:
        """The same translation with the local binary and model file named in its rewrites, where known."""
        local = {"binary": binary, "model": model}

        aliases = TOOLS[self.tool].aliases

        def fill(r: Rewrite) -> Rewrite:
            key = "binary" if r.flag == self.binary and r.recorded is None else \
                "model" if aliases.get(r.flag.lstrip("-"), r.flag.lstrip("-")) == "model" else None
            return replace(r, local=local[key]) if key and local[key] else r

        return replace(self, rewrites=tuple(fill(r) for r in self.rewrites))

    def preset(self, description: str) -> Preset:
        """The flags as a preset for the engine seam; a value llama-server would refuse is a usage error here."""
        try:
            return Preset(flags=dict(self.flags), role="experiment", description=description)
        except ValidationError as exc:
            msg = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise UsageError(f"{self.source}: {msg}; the record's launch cannot be served as recorded") from None


def _is_flag(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _NUMBER.fullmatch(token)


def _shown(name: str, value: str | None) -> str | None:
    """A value as a rewrite lists it: a secret (`redact.holds_secret`) as `<redacted>`, as in every file."""
    return REDACTED if value is not None and holds_secret(name, value) else value


def _split(arguments: list[str], table: FlagTable | None = None) -> list[tuple[str, str | None, str | None]]:
    """(token as recorded, value or None, problem or None) for each flag; a bare argument is a problem."""
    aliases, boolean = (table.aliases, table.boolean) if table else (ALIASES, BOOLEAN)
    out: list[tuple[str, str | None, str | None]] = []
    i = 0
    while i < len(arguments):
        token = arguments[i]
        i += 1
        if not _is_flag(token):
            out.append((token, None, "a bare argument where a flag was expected"))
            continue
        if token.startswith("--") and "=" in token:
            flag, value = token.split("=", 1)
            out.append((flag, value, None))
            continue
        name = aliases.get(token.lstrip("-"), token.lstrip("-"))
        if name in boolean:
            out.append((token, None, None))
            continue
        takes = 2 if name in TWO_VALUES else 1
        values = []
        while takes and i < len(arguments) and not _is_flag(arguments[i]):
            values.append(arguments[i])
            i += 1
            takes -= 1
        out.append((token, " ".join(values) if values else None, None))
    return out


def _known(name: str) -> bool:
    return name in KNOWN or name in BOOLEAN or name.startswith(KNOWN_PREFIXES)


@dataclass(frozen=True)
class FlagTable:
    """One llama.cpp tool's flags: its short names, which take no value, which it knows, and what each means here.

    `to_server`: this tool's setting → the llama-server flag of the same setting (and how a value maps);
    `protocol`: flags that describe the measurement, not the server; `drop`: flags of the tool's own I/O or prompt.
    """

    tool: str
    aliases: dict[str, str]
    boolean: frozenset[str]
    known: frozenset[str]
    to_server: dict[str, str] = field(default_factory=dict)
    protocol: dict[str, str] = field(default_factory=dict)
    drop: dict[str, str] = field(default_factory=dict)
    lists: bool = False  # llama-bench: every value may be a comma list, one test per element


SERVER = FlagTable("llama-server", ALIASES, BOOLEAN, KNOWN)

# llama-bench (`llama-bench --help`): values are comma lists, a test per element; 0/1 where the server has a switch.
BENCH = FlagTable(
    "llama-bench",
    aliases={"m": "model", "p": "n-prompt", "n": "n-gen", "pg": "pg", "d": "n-depth", "b": "batch-size",
             "ub": "ubatch-size", "ctk": "cache-type-k", "ctv": "cache-type-v", "t": "threads", "C": "cpu-mask",
             "ngl": "n-gpu-layers", "ncmoe": "n-cpu-moe", "sm": "split-mode", "mg": "main-gpu",
             "nkvo": "no-kv-offload", "fa": "flash-attn", "mmp": "mmap", "embd": "embeddings", "ts": "tensor-split",
             "ot": "override-tensors", "r": "repetitions", "o": "output", "oe": "output-err", "v": "verbose",
             "dev": "device", "nopo": "no-op-offload", "hf": "hf-repo", "hfr": "hf-repo", "hff": "hf-file",
             "hft": "hf-token", "lm": "load-mode", "lzm": "lazy-mode", "fitt": "fit-target", "fitc": "fit-ctx"},
    boolean=frozenset({"verbose", "progress", "list-devices", "no-warmup", "help", "offline"}),
    known=frozenset({"model", "n-prompt", "n-gen", "pg", "n-depth", "batch-size", "ubatch-size", "cache-type-k",
                     "cache-type-v", "threads", "cpu-mask", "cpu-strict", "poll", "n-gpu-layers", "n-cpu-moe",
                     "split-mode", "main-gpu", "no-kv-offload", "flash-attn", "mmap", "embeddings", "tensor-split",
                     "override-tensors", "repetitions", "prio", "delay", "output", "output-err", "verbose",
                     "progress", "device", "list-devices", "no-warmup", "numa", "rpc", "no-op-offload",
                     "hf-repo", "hf-file", "hf-token", "offline", "load-mode", "lazy-mode", "fit-target", "fit-ctx",
                     "no-host", "repack"}),
    to_server={"model": "model", "batch-size": "batch-size", "ubatch-size": "ubatch-size",
               "cache-type-k": "cache-type-k", "cache-type-v": "cache-type-v", "threads": "threads",
               "cpu-mask": "cpu-mask", "cpu-strict": "cpu-strict", "poll": "poll", "prio": "prio",
               "n-gpu-layers": "n-gpu-layers", "n-cpu-moe": "n-cpu-moe", "split-mode": "split-mode",
               "main-gpu": "main-gpu", "tensor-split": "tensor-split", "override-tensors": "override-tensor",
               "device": "device", "numa": "numa", "rpc": "rpc", "flash-attn": "flash-attn",
               "no-kv-offload": "no-kv-offload", "mmap": "no-mmap", "no-op-offload": "no-op-offload",
               "embeddings": "embedding", "hf-repo": "hf-repo", "hf-file": "hf-file", "hf-token": "hf-token",
               "offline": "offline", "load-mode": "load-mode", "lazy-mode": "lazy-mode", "fit-target": "fit-target",
               "fit-ctx": "fit-ctx", "no-host": "no-host", "repack": "no-repack"},
    protocol={"n-prompt": "prompt tokens of each prompt-processing test (the context marks)",
              "n-gen": "tokens generated by each generation test (the output length)",
              "n-depth": "tokens already in the context before each test",
              "repetitions": "repetitions of each test (the samples per cell), not llama-server's reverse prompt",
              "pg": "combined prompt+generation tests", "no-warmup": "llama-bench skips its warmup run",
              "delay": "seconds between tests"},
    drop={"output": "llama-bench's report format", "output-err": "llama-bench's report format",
          "verbose": "llama-bench's log", "progress": "llama-bench's progress lines",
          "list-devices": "prints and exits", "help": "prints and exits"},
    lists=True,
)

# llama-cli: the server's settings, plus a prompt and an interactive session that a bench replaces.
_CLI_ONLY = {"prompt": "the record's prompt text; the protocol sends its own prompts",
             "file": "a prompt file of the recorded host; the protocol sends its own prompts",
             "binary-file": "a prompt file of the recorded host", "system-prompt": "a chat system prompt",
             "system-prompt-file": "a file of the recorded host", "interactive": "an interactive session",
             "interactive-first": "an interactive session", "conversation": "an interactive chat session",
             "no-conversation": "a one-shot completion", "single-turn": "a one-shot chat turn",
             "multiline-input": "terminal input", "in-prefix": "terminal input", "in-suffix": "terminal input",
             "in-prefix-bos": "terminal input", "color": "terminal colours", "simple-io": "terminal output",
             "no-display-prompt": "terminal output", "display-prompt": "terminal output",
             "reverse-prompt": "stops the interactive session at a text; the protocol decides when to stop",
             "prompt-cache": "a file of the recorded host", "prompt-cache-all": "llama-cli's prompt cache file",
             "prompt-cache-ro": "llama-cli's prompt cache file"}
CLI = FlagTable(
    "llama-cli",
    aliases={**ALIASES, "p": "prompt", "f": "file", "bf": "binary-file", "sys": "system-prompt",
             "sysf": "system-prompt-file", "i": "interactive", "if": "interactive-first", "cnv": "conversation",
             "no-cnv": "no-conversation", "st": "single-turn", "mli": "multiline-input", "r": "reverse-prompt",
             "n": "n-predict"},
    boolean=BOOLEAN | {"interactive", "interactive-first", "conversation", "no-conversation", "single-turn",
                       "multiline-input", "in-prefix-bos", "simple-io", "no-display-prompt", "display-prompt",
                       "prompt-cache-all", "prompt-cache-ro"},
    known=KNOWN | frozenset(_CLI_ONLY),
    protocol={"n-predict": "tokens to generate (the output length)"},
    drop=_CLI_ONLY,
)
TOOLS: dict[str, FlagTable] = {t.tool: t for t in (SERVER, BENCH, CLI)}


def tool_of(argv0: str | None) -> FlagTable:
    """The flag table of the binary a record ran (llama-server when it names none)."""
    name = PurePosixPath(argv0 or "").name
    for tool in ("llama-bench", "llama-cli"):
        if tool in name:
            return TOOLS[tool]
    return SERVER


def _binary_rewrite(argv0: str, table: FlagTable) -> Rewrite:
    name = PurePosixPath(argv0).name
    if table is not SERVER:
        return Rewrite(argv0, None, "rewritten", "the engine's llama-server (see engine)",
                       f"the record ran {table.tool}; its server settings are served by llama-server here, each "
                       "flag read with " + table.tool + "'s own meaning")
    ok = "llama-server" in name or name == "server"
    return Rewrite(argv0, None, "rewritten", "the engine's llama-server (see engine)",
                   "the engine seam locates the binary" if ok else f"{name!r} is not llama-server",
                   changes_measurement=not ok)


def translate_llamacpp(arguments: list[str], *, source: str) -> Translation:
    """The recorded argv (binary first, or flags only) → local preset flags and the listed rewrites, each flag read
    by the table of the tool the record ran."""
    argv = list(arguments)
    binary = argv.pop(0) if argv and not argv[0].startswith("-") else None
    table = tool_of(binary)
    rewrites: list[Rewrite] = [_binary_rewrite(binary, table)] if binary is not None else []
    flags: dict[str, FlagValue] = {}
    bench: dict[str, tuple[int, ...]] = {}
    for token, value, problem in _split(argv, table):
        raw = token.lstrip("-")
        name = table.aliases.get(raw, raw)
        if problem is not None:
            rewrites.append(Rewrite(token, None, "dropped", None, problem, changes_measurement=True))
            continue
        if table is SERVER:
            rewrites.extend(_one(token, name, raw, value, flags))
        else:
            rewrites.extend(_tool_flag(table, token, name, raw, value, flags, bench))
    return Translation(source=source, recorded_argv=tuple(arguments), binary=binary, flags=flags,
                       rewrites=tuple(rewrites), tool=table.tool, bench=bench)


def _ints(value: str | None) -> tuple[int, ...] | None:
    parts = (value or "").split(",")
    return tuple(int(p) for p in parts) if parts and all(re.fullmatch(r"\d+", p) for p in parts) else None


def _tool_flag(table: FlagTable, token: str, name: str, raw: str, value: str | None, flags: dict[str, FlagValue],
               bench: dict[str, tuple[int, ...]]) -> list[Rewrite]:
    """One flag of llama-bench or llama-cli, by that tool's meaning."""
    shown = _shown(name, value)
    if name in table.protocol:
        if name in ("n-prompt", "n-gen", "n-depth", "repetitions", "n-predict"):
            nums = _ints(value)
            if nums is None:
                return [Rewrite(token, shown, "dropped", None, f"{table.tool} {name}: not a list of token counts",
                                changes_measurement=True)]
            bench["n-gen" if name == "n-predict" else name] = nums
        elif value is None:
            bench[name] = (1,)  # a switch (llama-bench --no-warmup)
        return [Rewrite(token, shown, "protocol", None, f"{table.tool} {name}: {table.protocol[name]}")]
    if name in table.drop:
        return [Rewrite(token, shown, "dropped", None, f"{table.tool} {name}: {table.drop[name]}")]
    if table is CLI:  # the rest of llama-cli's flags are the server's own settings
        return _one(token, name, raw, value, flags)
    server = table.to_server.get(name)
    if server is None:
        return [Rewrite(token, shown, "dropped", None, f"not a {table.tool} flag servepack knows; its meaning is "
                        "unknown, so it is not guessed", changes_measurement=True)]
    values = list(dict.fromkeys((value or "").split(","))) if table.lists and value is not None else [value]
    if len(values) > 1:
        return [Rewrite(token, shown, "dropped", None, f"{table.tool} ran one test per value of {name}; one server "
                        "serves one: give the record's value you want in PACK", changes_measurement=True)]
    v = values[0]
    if name in ("flash-attn",) and v in ("0", "1"):
        v = {"0": "off", "1": "on"}[v]
    if name in ("mmap", "no-kv-offload", "no-op-offload", "embeddings", "no-host", "repack", "offline"):
        # 0/1 in llama-bench (--offline: a switch in both), a switch in the server
        on = value is None or v not in ("0", "false")
        if name in ("mmap", "repack"):
            on = not on  # -mmp 0 is llama-server's --no-mmap; --repack 0 its --no-repack
        if not on:
            return [Rewrite(token, shown, "normalized", None, f"{table.tool} {name} {value}: llama-server's default")]
        return [*_one(token, server, server, None, flags),
                Rewrite(token, shown, "normalized", f"--{server}", f"{table.tool} {name} {value} is llama-server's "
                        f"--{server}")]
    out = _one(token, server, server, v, flags)
    if server != raw and server not in ENGINE_OWNED and not any(r.action == "dropped" for r in out):
        out.append(Rewrite(token, shown, "normalized", f"--{server}" + (f" {_shown(server, v)}" if v else ""),
                           f"{table.tool} {name} is llama-server's --{server}"))
    return out


def _one(token: str, name: str, raw: str, value: str | None, flags: dict[str, FlagValue]) -> list[Rewrite]:
    shown = _shown(name, value)
    if name in ENGINE_OWNED:
        return [Rewrite(token, shown, "rewritten", ENGINE_OWNED[name], "set by the engine seam on every launch")]
    if name in MODEL_SOURCES or name in flag_policy.MODEL_SOURCES or name in flag_policy.MODEL_PRESETS:
        return [Rewrite(token, shown, "dropped", None, "where the recorded host got its weights; the local model "
                        "file replaces it")]
    if (dropped := _policy_drop(token, name, raw, shown)) is not None:
        return [dropped]
    if name in NEUTRAL_DROPS:
        return [Rewrite(token, shown, "dropped", None, NEUTRAL_DROPS[name])]
    if name in AFFECTING_DROPS:
        return [Rewrite(token, shown, "dropped", None, AFFECTING_DROPS[name], changes_measurement=True)]
    if not _NAME.fullmatch(name):
        return [Rewrite(token, shown, "dropped", None, "not a flag name servepack can pass (llama-server's "
                        "lower-case long names)", changes_measurement=True)]
    new: FlagValue = True if value is None else int(value) if re.fullmatch(r"-?\d+", value) else value
    out: list[Rewrite] = []
    if name in flags and flags[name] != new:
        if name in REPEATABLE:
            return [Rewrite(token, shown, "dropped", None, f"given again after {flags[name]!r}: llama-server applies "
                            "every one, a preset passes one value per flag", changes_measurement=True)]
        out.append(Rewrite(token, shown, "normalized", None, f"given again after {flags[name]!r}: the last value "
                           "passes, as llama-server keeps the last"))
    flags[name] = new
    if raw != name:
        out.append(Rewrite(token, shown, "normalized", f"--{name}" + (f" {shown}" if shown is not None else ""),
                           "llama-server's long name for the same flag"))
    if not _known(name):
        out.append(Rewrite(token, shown, "passed-unknown", None, "not a llama-server flag servepack knows; passed "
                           "as recorded, the local llama-server refuses it if it does not know it either"))
    return out


def _policy_drop(token: str, name: str, raw: str, shown: str | None) -> Rewrite | None:
    """A flag servepack's flag policy holds (tools, host files, downloads, ...): never passed from a record, which
    names another host's paths; `--allow-server-flag` lets a pack's own preset carry one, never a record."""
    family = family_of("llama.cpp", name) or family_of("llama.cpp", raw)
    if family is None:
        return None
    why = NEUTRAL_DROPS.get(name) or AFFECTING_DROPS.get(name) or f"it {family.does} (flag family {family.name})"
    return Rewrite(token, shown, "dropped", None, why, changes_measurement=name in AFFECTING_DROPS)


TRANSLATORS = {"llama.cpp": translate_llamacpp}


class NoTranslation(UsageError):
    """The record's engine has no launch translation here: `reproduce --dry-run` shows its launch instead."""


def translate(engine: str, arguments: list[str], *, source: str) -> Translation:
    """The record's launch for `engine` (a name of the engine catalog); NoTranslation for an engine with none."""
    translator = TRANSLATORS.get(engine)
    if translator is None:
        raise NoTranslation(f"{source}: the record's engine {engine!r} has no launch translation; servepack "
                            f"reproduces records of {sorted(TRANSLATORS)}")
    if not arguments:
        raise UsageError(f"{source}: the record's tokenized launch is empty; nothing to reproduce")
    return translator(arguments, source=source)
