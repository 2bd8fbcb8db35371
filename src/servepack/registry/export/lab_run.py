"""A CPU box's run in the registry's lab format (lab/runs/…): the lab carries CPU machines, its collections do not."""

from __future__ import annotations

import re
from typing import Any

from servepack.packs.schema import HfSource, Pack
from servepack.records.claims import RunView
from servepack.registry.export.fields import slug, whole_number, zulu
from servepack.registry.export.hardware import HardwareChoice
from servepack.registry.export.model import served_name_of
from servepack.registry.export.sweep import figure_count

OWN_FOLDER = "servepack"  # servepack's own records of a CPU run, beside (never inside) the registry's collections
LAB_MIN_TPS = 15.0  # the lab's speed gate (lab/lab.py MIN_TPS): decode at concurrency 1
LAB_GATES = ("load", "chat", "reasoning", "tools", "context", "speed")


def cpu_box(view: RunView, hw: HardwareChoice) -> bool:
    """A run on a host without a GPU whose hardware the catalog lacks: exported as the lab's CPU box."""
    return not view.receipt.host.gpus and not hw.in_catalog


def lab_run_record(view: RunView, pack: Pack, card: str, prov: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The run in the lab's format (lab/runs/<card>.<model>.<profile>.<ctx>k.<time>.json): what it ran, where, and
    the lab's gates that servepack measured (load, speed); the others were not run, so `passed` is false."""
    r, bench = view.receipt, view.bench
    assert bench is not None and r.engine is not None
    host = r.host
    src = pack.model.source
    weights = (f"{src.repo}@{src.revision}" if isinstance(src, HfSource) else pack.model.name)
    profile = f"servepack-{slug(pack.engine.name)}-{slug(pack.id)}"
    flags = r.preset.flags if r.preset else {}
    ctx = whole_number(flags.get("ctx-size")) or max((c.context_tokens for c in bench.cells), default=0)
    cells = sorted(bench.cells, key=lambda c: (c.concurrency, c.context_tokens))
    one = [c for c in cells if c.concurrency == 1]
    tps = one[0].decode_tok_s_client.median if one else None
    pre = one[-1].prompt_per_ttft_tok_s_client.median if one else None
    where = {"on": "owner", "gpu": f"{host.cpu_model}, {host.cpu_cores_logical} logical cores, {host.ram_gib:.0f} GiB "
             "RAM, no GPU"}
    ok = {"load": r.server is not None and r.server.ready_s is not None,
          "speed": tps is not None and tps >= LAB_MIN_TPS}
    at = zulu(r.ended_at)
    run = {
        "recipe": {"model": slug(pack.model.name), "weights": weights,
                   "engine": f"{profile}@{(r.engine.sha256 or '')[:12]}",
                   "set": {k: v for k, v in flags.items() if not isinstance(v, list)}, "card": card},
        "where": where, "passed": all(ok.get(g) for g in LAB_GATES),
        "proof": {"at": at[:10], **where, "gates": " ".join(g for g in LAB_GATES if ok.get(g)),
                  "tps": None if tps is None else round(tps, 1), "prefill": None if pre is None else round(pre),
                  "served": served_name_of(flags, pack.model.file or pack.model.name)},
        "evidence": {"ok": ok, "not_run": [g for g in LAB_GATES if g not in ok],
                     "speed": {"concurrency": 1, "context_tokens": one[0].context_tokens if one else None,
                               "generated_tokens": one[0].gen_tokens if one else None,
                               "samples": figure_count(one[0]) if one else None},
                     "servepack": {"run_id": r.run_id, "receipt": prov["sources"][0]["url"],
                                   "engine": "native llama.cpp build (no container image): the profile names the "
                                             "servepack pack, the digest is the engine binary's sha256"}},
        "launch_config_sha256": None,
    }
    stamp = re.sub(r"[^0-9T]", "", at.split(".")[0])[:15]
    return f"lab/runs/{card}.{slug(pack.model.name)}.{profile}.{max(ctx, 1024) // 1024}k.{stamp}.json", run
