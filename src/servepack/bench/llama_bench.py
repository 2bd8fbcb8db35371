"""llama-bench alongside the server: run it with the preset's flags, parse `-o json`, pair the shapes."""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import Field, ValidationError

from servepack.engine.environ import server_env
from servepack.errors import EngineError, UsageError
from servepack.packs.schema import FlagValue
from servepack.safepath import read_bounded
from servepack.strict import Strict

LLAMA_BENCH_SCHEMA: Final = "servepack.llama_bench/v1"
MAX_RESULT_BYTES = 16 << 20  # a llama_bench.json read back (`bench --llama-bench-json`): far past any real one
RESULT_HINT = "give a llama_bench.json that `servepack llama-bench` wrote"
# llama-server long flag → llama-bench flag; only the ones that change kernel speed.
FLAG_MAP = {
    "n-gpu-layers": "-ngl", "ngl": "-ngl", "gpu-layers": "-ngl", "flash-attn": "-fa", "fa": "-fa",
    "batch-size": "-b", "b": "-b", "ubatch-size": "-ub", "ub": "-ub", "cache-type-k": "-ctk", "ctk": "-ctk",
    "cache-type-v": "-ctv", "ctv": "-ctv", "threads": "-t", "t": "-t",
}


class LlamaBenchTest(Strict):
    """One llama-bench test: pp (n_gen == 0) or tg (n_prompt == 0) with every repetition."""

    kind: Literal["pp", "tg", "pp+tg"]
    n_prompt: int
    n_gen: int
    n_depth: int
    avg_ts: float
    stddev_ts: float
    samples_ts: list[float]
    raw: dict[str, Any] = Field(description="the whole JSON object llama-bench printed")


class LlamaBenchResult(Strict):
    schema_version: Literal["servepack.llama_bench/v1"] = LLAMA_BENCH_SCHEMA
    argv: list[str]
    exit_code: int
    tests: list[LlamaBenchTest]
    ignored_lines: int = Field(description="log lines mixed into stdout and skipped")
    environment_dropped: list[str] = Field(
        default_factory=list, description="names of servepack's variables llama-bench did not get (allow-list)")


class ShapeRatio(Strict):
    """server figure ÷ llama-bench figure for the same shape."""

    metric: Literal["prefill", "decode"]
    context_tokens: int
    gen_tokens: int
    server_tok_s: float
    llama_bench_tok_s: float
    ratio: float
    note: str


def bench_args(flags: Mapping[str, FlagValue]) -> list[str]:
    """llama-bench flags from a preset's llama-server flags (unknown ones are not llama-bench's business)."""
    args: list[str] = []
    for name, value in flags.items():
        short = FLAG_MAP.get(name)
        if short is None or value is False:
            continue
        if short == "-fa":
            value = {True: "1", "on": "1", "off": "0", "auto": "auto"}.get(value, value)
        args += [short, str(value)]
    return args


def parse_output(stdout: str) -> tuple[list[dict[str, Any]], int]:
    """The JSON array in stdout, tolerating log lines before, after or between its objects."""
    objects: list[dict[str, Any]] = []
    ignored = 0
    decoder = json.JSONDecoder()
    i, n = 0, len(stdout)
    while i < n:
        j = stdout.find("{", i)
        if j < 0:
            break
        skipped = stdout[i:j].strip(" \t\r\n[],")
        ignored += len([ln for ln in skipped.splitlines() if ln.strip(" \t[],")])
        try:
            obj, end = decoder.raw_decode(stdout, j)
        except ValueError:
            ignored += 1
            nl = stdout.find("\n", j)
            i = n if nl < 0 else nl + 1
            continue
        if isinstance(obj, dict) and "avg_ts" in obj:
            objects.append(obj)
        i = end
    tail = stdout[i:].strip(" \t\r\n[],")
    ignored += len([ln for ln in tail.splitlines() if ln.strip(" \t[],")])
    return objects, ignored


def to_test(obj: dict[str, Any]) -> LlamaBenchTest:
    n_p, n_g = int(obj.get("n_prompt", 0)), int(obj.get("n_gen", 0))
    kind: Literal["pp", "tg", "pp+tg"] = "pp" if n_g == 0 else "tg" if n_p == 0 else "pp+tg"
    return LlamaBenchTest(kind=kind, n_prompt=n_p, n_gen=n_g, n_depth=int(obj.get("n_depth", 0)),
                          avg_ts=float(obj["avg_ts"]), stddev_ts=float(obj.get("stddev_ts", 0.0)),
                          samples_ts=[float(x) for x in obj.get("samples_ts", [])], raw=obj)


class LlamaBenchFailed(EngineError):
    """llama-bench failed (exited non-zero, or ran past its time); `partial` holds the tests it finished before,
    with its exit code (-1: stopped at the time limit), for the caller to write before the error."""

    def __init__(self, message: str, partial: LlamaBenchResult | None) -> None:
        super().__init__(message)
        self.partial = partial


def _as_text(out: str | bytes | None) -> str:
    return out.decode("utf-8", errors="replace") if isinstance(out, bytes) else out or ""


def run_llama_bench(
    binary: Path, model: Path, flags: Mapping[str, FlagValue], *, prompt_tokens: Sequence[int],
    gen_tokens: Sequence[int], repetitions: int, batch_size: int | None = None, timeout_s: float = 3600,
) -> LlamaBenchResult:
    argv = [str(binary), "-m", str(model), "-o", "json", "-r", str(repetitions),
            "-p", ",".join(map(str, prompt_tokens)), "-n", ",".join(map(str, gen_tokens)), *bench_args(flags)]
    if batch_size is not None and "-b" not in argv:
        argv += ["-b", str(batch_size)]
    env = server_env("native")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False, env=env.env)
    except subprocess.TimeoutExpired as exc:
        objects, ignored = parse_output(_as_text(exc.stdout))  # the tests it finished before the limit
        partial = LlamaBenchResult(argv=argv, exit_code=-1, tests=[to_test(o) for o in objects],
                                   ignored_lines=ignored, environment_dropped=list(env.dropped)) if objects else None
        raise LlamaBenchFailed(f"llama-bench did not finish in {timeout_s:.0f} s; lower -r or the shapes",
                               partial) from None
    except OSError as exc:
        raise EngineError(f"cannot run {binary} ({exc.strerror}); set SERVEPACK_LLAMA_BENCH") from None
    objects, ignored = parse_output(done.stdout)
    result = LlamaBenchResult(argv=argv, exit_code=done.returncode, tests=[to_test(o) for o in objects],
                              ignored_lines=ignored, environment_dropped=list(env.dropped))
    if done.returncode != 0 or not objects:
        last = (done.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise LlamaBenchFailed(f"llama-bench exited {done.returncode} with {len(objects)} results: {last}",
                               result if objects else None)
    return result


def shape_ratios(
    result: LlamaBenchResult, cells: Sequence[tuple[int, int, float | None, float | None]]
) -> list[ShapeRatio]:
    """For each (context, gen, server prefill, server decode): ratios against pp<context> and tg<gen>."""
    pp = {t.n_prompt: t.avg_ts for t in result.tests if t.kind == "pp" and t.n_depth == 0}
    tg = {t.n_gen: t.avg_ts for t in result.tests if t.kind == "tg" and t.n_depth == 0}
    out: list[ShapeRatio] = []
    for ctx, gen, prefill, decode in cells:
        if prefill and pp.get(ctx):
            out.append(ShapeRatio(metric="prefill", context_tokens=ctx, gen_tokens=gen, server_tok_s=prefill,
                                  llama_bench_tok_s=pp[ctx], ratio=prefill / pp[ctx],
                                  note=f"server prefill (server timings) ÷ llama-bench pp{ctx}"))
        if decode and tg.get(gen):
            out.append(ShapeRatio(metric="decode", context_tokens=ctx, gen_tokens=gen, server_tok_s=decode,
                                  llama_bench_tok_s=tg[gen], ratio=decode / tg[gen],
                                  note=f"server decode at depth {ctx} ÷ llama-bench tg{gen} at depth 0"))
    return out


def read_result(path: Path, label: str) -> LlamaBenchResult:
    """A llama_bench.json read back whole and checked (`bench --llama-bench-json`): a regular file of at most 16 MiB
    (`safepath.read_bounded`: a FIFO, a device or a folder is named as what it is), of this schema, every rate a
    finite number ≥ 0; a UsageError (exit 2) naming `label` and the fix otherwise. Read before any server starts."""
    raw = read_bounded(path, MAX_RESULT_BYTES, RESULT_HINT, label=label)
    try:
        result = LlamaBenchResult.model_validate_json(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "the document"
        raise UsageError(f"{label}: not a llama_bench.json ({where}: {err['msg']}); {RESULT_HINT}") from None
    for t in result.tests:
        if not all(math.isfinite(v) and v >= 0 for v in (t.avg_ts, t.stddev_ts, *t.samples_ts)):
            raise UsageError(f"{label}: test {t.kind} n_prompt {t.n_prompt} n_gen {t.n_gen} has a rate that is not "
                             f"a finite number ≥ 0; {RESULT_HINT}")
    why = partial_reason(result)
    if why is not None:
        raise UsageError(f"{label}: a partial llama_bench.json ({why}); {RESULT_HINT} from a llama-bench run that "
                         "finished")
    return result


def _argv_ints(argv: Sequence[str], flag: str) -> tuple[int, ...] | None:
    """The comma list of whole numbers `argv` gives `flag` last, or None where it gives none (or not numbers)."""
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
    parts = values[-1].split(",") if values else []
    return tuple(int(p) for p in parts) if parts and all(p.isdigit() for p in parts) else None


def partial_reason(result: LlamaBenchResult) -> str | None:
    """Why a llama_bench.json is not a whole run, in words, or None: llama-bench stopped (its exit code; -1: its time
    limit), no test, a prompt or generation size its argv asks for (-p/-n) with no test, a test with another number
    of samples than its -r, or a test whose fields disagree with llama-bench's own object (`raw`)."""
    if result.exit_code != 0:
        stopped = "stopped at its time limit" if result.exit_code == -1 else f"exited {result.exit_code}"
        return f"llama-bench {stopped} after {len(result.tests)} test(s)"
    if not result.tests:
        return "no test"
    have = {(t.kind, t.n_prompt if t.kind == "pp" else t.n_gen) for t in result.tests}
    want = [("pp", n) for n in _argv_ints(result.argv, "-p") or () if n > 0] + \
        [("tg", n) for n in _argv_ints(result.argv, "-n") or () if n > 0]
    missing = [f"{k}{n}" for k, n in want if (k, n) not in have]
    if missing:
        return f"no test for {', '.join(missing)}, which its argv asks for"
    reps = _argv_ints(result.argv, "-r")
    for t in result.tests:
        shape = f"{t.kind}{t.n_prompt if t.kind == 'pp' else t.n_gen}"
        if reps and len(t.samples_ts) != reps[-1]:
            return f"test {shape} has {len(t.samples_ts)} sample(s), its argv's -r {reps[-1]}"
        for key, value in (("n_prompt", t.n_prompt), ("n_gen", t.n_gen), ("avg_ts", t.avg_ts)):
            said = t.raw.get(key)
            if said is not None and said != value:
                return f"test {shape}'s {key} is {value}, llama-bench's own object says {said!r}"
    return None
