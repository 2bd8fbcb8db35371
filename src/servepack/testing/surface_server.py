"""A scripted llama-server whose speed follows a known response surface of its llama.cpp flags (tests, benchmarks).

`python -m servepack.testing.surface_server --threads 8 --batch-size 1024 --ubatch-size 256 --flash-attn on ...`
serves like `fake_server`, at the decode and prefill speed `surface(flags)` gives, with seeded noise per launch and
per request. Some flag sets fail to load (an out-of-memory compute buffer), one crashes mid-run, one "hogs memory"
(it writes its pid to $SURFACE_HOG_FILE, which a test's memory reading can watch). The true optimum is known, so a
tuner's answer can be scored.

Environment: SURFACE_NOISE (relative sd per request, default 0.02), SURFACE_LAUNCH_NOISE (per launch, 0.015),
SURFACE_SEED (default: from the pid), SURFACE_SCALE (multiplies every speed, default 1), SURFACE_HOG_FILE.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servepack.testing.fake_server import Script, ScriptedServer, pieces, template

CORES = 8
BASE_DECODE = 90.0
BASE_PREFILL = 900.0
THREADS = (2, 4, 6, 8, 12, 16)
BATCH = (256, 512, 1024, 2048)
UBATCH = (128, 256, 512, 1024)
FLASH = ("on", "off")
CRASH_AFTER = 1


@dataclass(frozen=True)
class Outcome:
    """What a flag set does: fails to load (with llama.cpp's words), or serves at these speeds."""

    decode_tok_s: float
    prefill_tok_s: float
    load_error: str | None = None
    crash_after: int | None = None
    hog: bool = False


def _thread_eff(t: int) -> float:
    """Decode scales sub-linearly with threads up to the core count; oversubscription costs more than it gives."""
    return float((CORES / t) ** 1.4 if t > CORES else (t / CORES) ** 0.55)


def surface(threads: int, batch: int, ubatch: int, flash: bool) -> Outcome:
    """The known response surface (tok/s, no noise): threads matter most, flash attention a little, ubatch less."""
    ub_decode = {128: 1.0, 256: 1.012, 512: 1.02, 1024: 0.975}.get(ubatch, 1.0)
    batch_decode = 0.985 if batch >= 2048 else 1.0
    decode = BASE_DECODE * _thread_eff(threads) * (1.06 if flash else 1.0) * ub_decode * batch_decode
    ub_prefill = {128: 0.62, 256: 0.8, 512: 1.0, 1024: 1.08}.get(ubatch, 1.0)
    prefill = BASE_PREFILL * _thread_eff(threads) * (1.12 if flash else 1.0) * ub_prefill
    if ubatch >= 1024 and batch >= 2048 and not flash:
        return Outcome(decode, prefill, load_error="ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate "
                       "compute buffer of 3.1 GiB\nllama_init_from_model: failed to initialize the context")
    if threads == 16 and ubatch == 1024:
        return Outcome(decode, prefill, load_error="error: invalid thread pool configuration (16 > 12)")
    crash = CRASH_AFTER if (threads == 12 and flash and ubatch == 512) else None
    return Outcome(decode, prefill, crash_after=crash, hog=(threads == 6 and batch == 2048 and ubatch == 1024))


def grid() -> list[dict[str, Any]]:
    """The benchmark's space as configurations (ubatch ≤ batch), for scoring a tuner against the truth."""
    return [{"threads": t, "batch-size": b, "ubatch-size": u, "flash-attn": f}
            for t, b, u, f in itertools.product(THREADS, BATCH, UBATCH, FLASH) if u <= b]


def true_decode(config: Mapping[str, Any]) -> float | None:
    """The noise-free decode speed of a configuration, or None if it fails to load or crashes."""
    o = surface(int(config["threads"]), int(config["batch-size"]), int(config["ubatch-size"]),
                _on(config["flash-attn"]))
    return None if o.load_error or o.crash_after else o.decode_tok_s


def _on(value: Any) -> bool:
    return value is True or str(value).lower() in ("on", "auto", "1", "true", "")


class SurfaceServer(ScriptedServer):
    """The fake server with per-request speeds drawn around the surface, and a scheduled crash."""

    def __init__(self, outcome: Outcome, rng: random.Random, noise: float, launch: float, *,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(Script(health_after=2, build_info="b1-surface"), host=host, port=port)
        self.outcome, self.rng, self.noise, self.launch = outcome, rng, noise, launch
        self.generated = 0

    async def _generate(self, path: str, req: dict[str, Any], w: asyncio.StreamWriter, t0: float) -> bool:
        if req.get("stream"):
            self.generated += 1
            if self.outcome.crash_after is not None and self.generated > self.outcome.crash_after:
                print("GGML_ASSERT(n_tokens_all <= cparams.n_batch) failed (surface crash)", flush=True)
                asyncio.get_running_loop().call_later(0.05, os._exit, 134)
            chat = path.startswith("/v1")
            n_prompt = len(pieces(template(req["messages"][-1]["content"]) if chat else req.get("prompt", "")))
            f = self.launch * max(0.5, self.rng.gauss(1.0, self.noise))
            self.script.itl_s = 1.0 / (self.outcome.decode_tok_s * f)
            self.script.ttft_s = n_prompt / (self.outcome.prefill_tok_s * f)
        return await super()._generate(path, req, w, t0)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="surface-llama-server", add_help=False)
    p.add_argument("--version", action="store_true")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("-t", "--threads", type=int, default=CORES)
    p.add_argument("-b", "--batch-size", type=int, default=2048)
    p.add_argument("-ub", "--ubatch-size", type=int, default=512)
    p.add_argument("-fa", "--flash-attn", nargs="?", const="on", default="auto")
    args, _ = p.parse_known_args(argv)
    return args


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    if args.version:
        print("version: 1 (abc1234)\nbuilt with surface stand-in for tests", file=sys.stderr)
        return
    print(f"surface llama-server argv: {sys.argv[1:] if argv is None else argv}", flush=True)
    if args.ubatch_size > args.batch_size:
        print(f"error: ubatch {args.ubatch_size} > batch {args.batch_size} (surface refuses)", flush=True)
        sys.exit(1)
    outcome = surface(args.threads, args.batch_size, args.ubatch_size, _on(args.flash_attn))
    if outcome.load_error:
        print(outcome.load_error, flush=True)
        sys.exit(1)
    scale = float(os.environ.get("SURFACE_SCALE", "1"))
    outcome = Outcome(outcome.decode_tok_s * scale, outcome.prefill_tok_s * scale, None, outcome.crash_after,
                      outcome.hog)
    hog_file = os.environ.get("SURFACE_HOG_FILE")
    if outcome.hog and hog_file:
        with open(hog_file, "w") as fh:
            fh.write(str(os.getpid()))
    rng = random.Random(int(os.environ.get("SURFACE_SEED", str(os.getpid()))))
    launch = max(0.5, rng.gauss(1.0, float(os.environ.get("SURFACE_LAUNCH_NOISE", "0.015"))))
    noise = float(os.environ.get("SURFACE_NOISE", "0.02"))
    SurfaceServer(outcome, rng, noise, launch, host=args.host, port=args.port).serve_forever()


if __name__ == "__main__":
    main()
