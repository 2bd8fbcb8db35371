"""Whether a recipe is runnable here (`registry choose`): five checks, each ok / not ok / unknown with the reason in
words.
- hardware: the record's hardware id is this host's detected id (`host.fingerprint.detected_hardware_id`) or a
  registry card this host is (`registry.cards`: `x86-64-avx2-cpu` by architecture and instruction set, a GPU's
  catalog id by its model and memory).
- engine: servepack drives the record's engine (`engine.catalog.ENGINES`) and finds its binary (the SERVEPACK_*
  variable, a shipped pack's pinned package, PATH); a different build than the record's is stated, not refused.
- model: a local file whose sha256 is the record's pin (--model-file, the servepack cache, the HF cache).
- memory: judged from what the launch does (`recipe_facts.weights_placement`: -ngl, --n-cpu-moe, --cpu-moe, -ot):
  weights on the GPU against its memory, in host RAM against the available RAM, split between them against both
  (each share unknown); no GPU here: all in RAM. The weights are a local GGUF's size (+ the KV cache from its
  header at the larger of the requested context and the launch's, its K/V types), else the size its model instance
  states (weights.size_gb: beyond is NO before anything else), else the memory the record states it used (its VRAM
  only where every weight was on the GPU, and only at the context it was measured at or below); unknown says what
  is not known. Weights alone never make "ok": a GGUF whose header lacks the attention shapes (or a K/V type not
  known) fits or not by its weights, and otherwise its KV cache is unknown, so the check is unknown.
- context: the requested context against the one the recipe launches with (more: not ok, its launch cannot hold
  it) and the largest it measured (more: unknown, speed and memory there were never measured). A lab recipe launches
  with the ctx the lab renders from its engine profile (`registry.format.lab_launch`: a template profile's defaults
  with the recipe's `set` over them); one the lab could not render is not ok, with the reason.
Runnable = every check ok; not runnable = any check not ok; otherwise unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from servepack.errors import ModelError, ServepackError, UsageError
from servepack.registry.format import LoadedRecord, lab_legacy_recipe
from servepack.registry.host_facts import HostFacts, commit_in
from servepack.registry.queries import StoredRecord, SweepRow
from servepack.registry.recipe_facts import (
    ModelPins,
    Placement,
    flag_value,
    launch_args,
    recipe_context,
    recipe_engine,
    weights_placement,
)
from servepack.weights.gguf import GgufHeader, read_header
from servepack.weights.hashcache import HashCache

GIB = 1 << 30
# bytes per element of llama.cpp's K/V cache types (--cache-type-k / --cache-type-v); default f16
KV_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
                 "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}
HASH_NOW_MAX_BYTES = 256 << 20  # a file found by name is hashed now only when this small; else its cached hash

CheckName = Literal["hardware", "engine", "model", "memory", "context"]


@dataclass(frozen=True)
class RunCheck:
    name: CheckName
    ok: bool | None
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.name, "ok": self.ok, "detail": self.detail}


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


def check_model(pins: ModelPins, local: list[LocalModel]) -> tuple[RunCheck, LocalModel | None]:
    pin = ", ".join(s[:12] + "…" for s in pins.sha256) or "no sha256"
    names = ", ".join(pins.file_names) or "no file name"
    if pins.sha256:
        match = next((m for m in local if m.sha256 in pins.sha256), None)
        if match:
            return RunCheck("model", True, f"{match.path} has the pinned sha256 {match.sha256[:12]}… ({match.how})"
                            if match.sha256 else f"{match.path}"), match
    unknown = next((m for m in local if m.sha256 is None), None)
    if unknown:
        return RunCheck("model", None, f"{unknown.path} found {unknown.how}; its sha256 is not known yet (pass "
                        f"--model-file {unknown.path} to hash it against {pin})"), unknown
    if local and not pins.sha256:
        m = local[0]
        return RunCheck("model", True, f"{m.path} ({m.how}); the record pins no sha256, so its bytes are unverified"), m
    if local:
        m = local[0]
        return RunCheck("model", False, f"{m.path} has sha256 {(m.sha256 or '?')[:12]}…, the record pins {pin}: "
                        "other weights"), m
    return RunCheck("model", False, f"no local file: the record names {names} and pins {pin}; pull it (the HF cache or "
                    "servepack's cache) or pass --model-file F"), None


def check_engine(loaded: LoadedRecord, host: HostFacts) -> RunCheck:
    name = recipe_engine(loaded)
    engine = loaded.record.get("engine") if isinstance(loaded.record.get("engine"), dict) else {}
    version = engine.get("version") if isinstance(engine, dict) else None
    if name is None and loaded.kind == "lab_recipe" and lab_legacy_recipe(loaded.record):
        return RunCheck("engine", False, f"the lab recipe names no engine profile: its launch is that of registry "
                        f"recipe {lab_legacy_recipe(loaded.record)!r} (lab.py render: legacy), which names the engine")
    if name is None:
        return RunCheck("engine", False, "the record names no engine")
    probe = host.engine(name)
    if probe.problem:
        return RunCheck("engine", False, probe.problem)
    said = " ".join((probe.version_text or "").split())[:80] or "no --version output"
    if not version:
        return RunCheck("engine", True, f"{probe.binary} ({said}): the record states no {name} build to compare with")
    rec_commit = commit_in(str(version))
    if rec_commit and probe.commit:
        same = rec_commit.startswith(probe.commit) or probe.commit.startswith(rec_commit)
    else:
        same = str(version) in (probe.version_text or "")
    build = ("the same build as the record" if same else
             f"a different build than the record's {name} {version!r}: its figures may not carry over")
    return RunCheck("engine", True, f"{probe.binary} ({said}): {build}")


def check_hardware(loaded: LoadedRecord, host: HostFacts) -> RunCheck:
    hw = loaded.record.get("card") if loaded.kind == "lab_recipe" else loaded.record.get("hardware_id")
    count = loaded.record.get("hardware_count") or 1
    if not isinstance(hw, str) or not hw:
        return RunCheck("hardware", None, f"the record names no hardware; this host is {host.hardware_id} "
                        f"({host.label})")
    if hw == host.hardware_id:
        return RunCheck("hardware", True, f"recorded on {hw}, as this host is detected")
    why = host.is_card(hw)
    if why:
        return RunCheck("hardware", True, f"recorded on {hw}; this host is {why}")
    cards = f"; the registry cards it is: {', '.join(host.cards)}" if host.cards else ""
    return RunCheck("hardware", False, f"recorded on {hw} ×{count}; this host is {host.hardware_id} ({host.label})"
                    + cards)


def check_context(requested: int, launch: int | None, measured: int | None, cannot_render: str | None = None
                  ) -> RunCheck:
    """The requested context against the recipe's launch (a hard limit) and what it measured (beyond: unknown); a
    lab recipe whose launch cannot be rendered launches nothing, so no context holds."""
    if cannot_render is not None:
        return RunCheck("context", False, f"asked {requested:,} tokens; the recipe's launch is not known: "
                        f"{cannot_render}")
    if launch is not None and requested > launch:
        return RunCheck("context", False, f"asked {requested:,} tokens; the recipe launches with a {launch:,}-token "
                        "context: as recorded it cannot hold that (a pack that serves more is no longer the recipe "
                        "as measured)")
    if measured is None:
        return RunCheck("context", None, f"asked {requested:,} tokens; the record states no context it measured"
                        + (f" (it launches with {launch:,})" if launch is not None else ""))
    if requested > measured:
        return RunCheck("context", None, f"asked {requested:,} tokens; the record measured up to {measured:,} only: "
                        "speed and memory beyond that were never measured")
    within = f", launches with {launch:,}" if launch is not None else ""
    return RunCheck("context", True, f"asked {requested:,} tokens; the record measured up to {measured:,}{within}")


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


def _fits(need: int, placement: Placement, host: HostFacts) -> tuple[bool | None, str]:
    """Whether `need` bytes (weights + KV cache) fit where the launch puts them, VRAM and RAM judged apart."""
    ram, vram = host.ram_available_bytes, host.gpu_memory_bytes
    ram_words = f"this host's {ram / GIB:.1f} GiB available RAM (of {host.ram_total_bytes / GIB:.1f} GiB)"
    if not vram:  # no GPU here: whatever the launch offloads, llama.cpp keeps it in host RAM
        return need <= ram, f"{'within' if need <= ram else 'beyond'} {ram_words} (no GPU here: all in host RAM)"
    vram_words = f"this host's {vram / GIB:.1f} GiB GPU memory"
    if placement.where == "gpu":
        return need <= vram, f"{'within' if need <= vram else 'beyond'} {vram_words} ({placement.why})"
    if placement.where == "host":
        return need <= ram, f"{'within' if need <= ram else 'beyond'} {ram_words} ({placement.why})"
    if need > ram + vram:
        return False, f"beyond {vram_words} and {ram_words} together ({placement.why})"
    if placement.where == "unknown" and need <= ram:
        # whatever the build does without -ngl (keep every weight in host RAM, or offload what fits, -ngl auto),
        # host RAM holds what the GPU does not
        return True, f"within {ram_words} alone ({placement.why})"
    if placement.where == "unknown" and need <= vram:
        return None, (f"within {vram_words} but beyond {ram_words}: it fits only where the build offloads by default "
                      f"(-ngl auto), not where it keeps the weights in host RAM ({placement.why})")
    return None, (f"within {vram_words} and {ram_words} together, but how much goes to each is not known "
                  f"({placement.why})")


def check_memory(loaded: LoadedRecord, host: HostFacts, model: LocalModel | None, context: int,
                 sweeps: list[tuple[StoredRecord, list[SweepRow]]],
                 weights: tuple[float, str] | None = None) -> RunCheck:
    """Memory judged from what the launch does (`weights_placement`: -ngl, --n-cpu-moe, --cpu-moe, -ot): the weights
    (a local GGUF's size, else the size its model instance states) and the KV cache (from the GGUF header at the
    context) against VRAM and RAM apart; then the memory the record states it used (VRAM: only where the launch
    keeps every weight on the GPU); unknown says what is not known."""
    placement = weights_placement(launch_args(loaded))
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
                why_no_kv = f"the GGUF header lacks the attention shapes or the K/V type {k_type}/{v_type} is unknown"
        except ServepackError as exc:
            why_no_kv = str(exc)
        need = model.size_bytes + (kv or 0)
        if kv is None:  # the weights alone: enough to say NO, never enough to say ok (issue 33)
            ok, where = _fits(need, placement, host)
            if ok is False:
                return RunCheck("memory", False, f"GGUF {need / GIB:.2f} GiB {where} before any KV cache (KV cache "
                             f"not estimable: {why_no_kv})")
            return RunCheck("memory", None, f"GGUF {need / GIB:.2f} GiB {where}; the KV cache at {n_ctx:,} tokens "
                         f"is unknown ({why_no_kv}), so weights and KV cache together are not known to fit")
        parts = f"GGUF {model.size_bytes / GIB:.2f} GiB + KV cache {kv / GIB:.2f} GiB at {n_ctx:,} tokens " \
                f"({k_type}/{v_type})"
        ok, where = _fits(need, placement, host)
        return RunCheck("memory", ok, f"needs {need / GIB:.2f} GiB ({parts}) {where}")
    if weights is not None:  # the weights alone, before any KV cache: enough to say a model cannot fit
        size_gb, said = weights
        ok, where = _fits(int(size_gb * 1e9), placement, host)
        if ok is False:
            return RunCheck("memory", False, f"{said}, {where} before any KV cache (no local GGUF to estimate from)")
    stated, at, what = _record_memory(sweeps)
    budget = host.gpu_memory_bytes or host.ram_available_bytes
    room = (f"this host's {host.gpu_memory_bytes / GIB:.1f} GiB GPU memory" if host.gpu_memory_bytes else
            f"this host's {host.ram_available_bytes / GIB:.1f} GiB available RAM (of "
            f"{host.ram_total_bytes / GIB:.1f} GiB; no GPU here)")
    if stated is not None:
        if stated > budget:
            return RunCheck("memory", False, f"{what}, beyond {room} (no local GGUF to estimate from)")
        if placement.where in ("split", "host"):
            return RunCheck("memory", None, f"{what}, within {room}; but {placement.why}, which that figure does not "
                            "count" + (f" ({weights[1]})" if weights else " (the weights' size is not known)"))
        if at is None or context > at:
            measured = f"measured at {at:,} tokens" if at is not None else "at a context it does not state"
            return RunCheck("memory", None, f"{what}, {measured}; {context:,} tokens need more KV cache, not known to "
                            f"fit {room} (pass --model-file F to estimate)")
        return RunCheck("memory", True, f"{what} at {at:,} tokens, within {room} (no local GGUF to estimate from)")
    if weights is not None:
        size_gb, said = weights
        _, where = _fits(int(size_gb * 1e9), placement, host)
        return RunCheck("memory", None, f"{said} fit {where}; the KV cache at {context:,} tokens is not known (no "
                        "local GGUF to estimate from: pass --model-file F)")
    return RunCheck("memory", None, f"not known: no local GGUF to read sizes from and the record states no memory "
                    f"figure; {room}; {placement.why}")
