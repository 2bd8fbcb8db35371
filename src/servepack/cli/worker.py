"""`servepack worker`: an llama.cpp rpc-server in the foreground, for the head of an RPC split."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from servepack.cli.render import echo
from servepack.engine.rpc import OPT_IN_FLAG, check_bind, locate_rpc_server, serve_worker, worker_rpc_server
from servepack.packs import load_pack
from servepack.packs.schema import MAX_THREADS
from servepack.settings import Settings


@click.command("worker")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything off loopback needs " + OPT_IN_FLAG + ".")
@click.option("--port", type=click.IntRange(1, 65534), default=50052, show_default=True,
              help="rpc-server port; this host's fingerprint is served on port + 1.")
@click.option("--device", "devices", multiple=True, help="rpc-server device (CUDA0, CPU, ...); repeatable.")
@click.option("--threads", type=click.IntRange(min=1, max=MAX_THREADS), help="Threads for the CPU device.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Enable rpc-server's tensor cache in DIR (LLAMA_CACHE).")
@click.option("--rpc-server", "rpc_server", type=click.Path(path_type=Path),
              help="rpc-server binary (default: SERVEPACK_RPC_SERVER, then the --pack's pinned RPC build).")
@click.option("--pack", "pack", help="Pack whose pinned RPC build supplies rpc-server (default: the embedded one).")
@click.option(OPT_IN_FLAG, "allow_public", is_flag=True,
              help="Allow binding an address off loopback. llama.cpp's RPC has no authentication.")
def worker_cmd(host: str, port: int, devices: tuple[str, ...], threads: int | None, cache_dir: Path | None,
               rpc_server: Path | None, pack: str | None, allow_public: bool) -> None:
    """Run rpc-server in the foreground until Ctrl-C and print what the head needs (--rpc HOST:PORT)."""
    check_bind(host, allow_public)  # refused before anything is looked up or started
    binary = (locate_rpc_server(None, rpc_server) if rpc_server is not None
              else worker_rpc_server(None, load_pack(pack), Settings.load().cache_dir))
    code = serve_worker(binary, host=host, port=port, devices=list(devices), threads=threads, cache_dir=cache_dir,
                        allow_public=allow_public, say=lambda m: echo(m, err=True))
    sys.exit(code)


COMMANDS = [worker_cmd]
