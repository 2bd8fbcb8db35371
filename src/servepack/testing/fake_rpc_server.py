"""A stand-in for llama.cpp's rpc-server, for tests only: it takes rpc-server's command line, announces an RPC
protocol version the way rpc-server does, and accepts (and closes) TCP connections on its port until stopped.

`python -m servepack.testing.fake_rpc_server --host 127.0.0.1 --port P [--device D] [--threads N] [--cache]`;
FAKE_RPC_PROTO sets the announced protocol (default 7.0.0), FAKE_RPC_MODE=die_early exits at once with code 3.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="fake-rpc-server", add_help=False)
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=50052)
    parser.add_argument("-d", "--device", default=None)
    parser.add_argument("-t", "--threads", type=int, default=1)
    parser.add_argument("-c", "--cache", action="store_true")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if os.environ.get("FAKE_RPC_MODE") == "die_early":
        print("error: no devices (fake)", flush=True)
        sys.exit(3)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((args.host, args.port))
        srv.listen(16)
        print(f"Starting RPC server v{os.environ.get('FAKE_RPC_PROTO', '7.0.0')}", flush=True)
        print(f"  endpoint       : {args.host}:{args.port}", flush=True)
        print(f"  local cache    : {os.environ.get('LLAMA_CACHE', 'n/a') if args.cache else 'n/a'}", flush=True)
        print(f"Devices:\n  {args.device or 'CPU'}: fake", flush=True)
        while True:
            conn, _ = srv.accept()
            conn.close()


if __name__ == "__main__":
    main()
