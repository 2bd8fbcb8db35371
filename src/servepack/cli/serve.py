"""`servepack serve` (foreground server) and `servepack doctor`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from servepack.cli._options import allow_server_flag_option, out_option, verify_model_option
from servepack.cli.render import echo, print_json, progress, table
from servepack.doctor import diagnose
from servepack.plan import RunOptions, plan_run
from servepack.session import open_session


@click.command("serve")
@click.argument("pack", required=False)
@click.option("--preset", help="Preset name (default: the pack's default_preset).")
@click.option("--port", type=click.IntRange(1, 65535), help="Port on 127.0.0.1, 1-65535 (default: a free one).")
@click.option("--server-bin", type=click.Path(path_type=Path), help="llama-server to use instead of the pin.")
@click.option("--model", "model_path", type=click.Path(path_type=Path), help="Model file instead of the pin.")
@out_option
@verify_model_option
@allow_server_flag_option
def serve_cmd(pack: str | None, preset: str | None, port: int | None, server_bin: Path | None,
              model_path: Path | None, out: Path | None) -> None:
    """Run llama-server in the foreground until Ctrl-C."""
    with open_session(plan_run(pack, preset, RunOptions(out=out, kind="serve", port=port, server_bin=server_bin,
                                                        model_path=model_path, progress=progress))) as s:
        body = json.dumps({"model": s.endpoint.model, "messages": [{"role": "user", "content": "ping"}],
                           "max_tokens": 16})
        echo(f"base URL: {s.endpoint.base_url}/v1   (model {s.endpoint.model}, api key: any placeholder)")
        echo(f"try: curl -s {s.endpoint.base_url}/v1/chat/completions -H 'Content-Type: application/json' "
             f"-d '{body}'")
        progress("serving; Ctrl-C stops the server")
        try:
            while True:
                s.endpoint.check_alive()
                time.sleep(0.5)
        except KeyboardInterrupt:
            progress("stopping")


@click.command("doctor")
@click.argument("pack", required=False)
@click.option("--server-bin", type=click.Path(path_type=Path), help="llama-server to check instead of the pin.")
@click.option("--model", "model_path", type=click.Path(path_type=Path), help="Model file instead of the pin.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
def doctor_cmd(pack: str | None, server_bin: Path | None, model_path: Path | None, as_json: bool) -> None:
    """Host fingerprint, engine found and its version, model present and verified."""
    report = diagnose(pack, server_bin=server_bin, model_path=model_path)
    if as_json:
        print_json(report.as_dict())
    else:
        h = report.host
        hw = report.hardware
        echo(f"host: {h.label()} · {h.cpu_arch} · {h.os} · kernel {h.kernel} · Python {h.python}")
        echo(f"hardware: detected {hw['detected_id']}; pack target {hw['target_id']} "
             f"{'matched' if hw['target_match'] else 'not matched: ' + '; '.join(hw['failed_rules'])}")
        for g in h.gpus:
            mem = f"{g.memory_total_bytes / 1024**3:.0f} GiB" if g.memory_total_bytes else g.memory_note
            echo(f"gpu {g.index}: {g.name} · {g.uuid} · {mem} · driver {h.gpu_driver} · "
                 f"CUDA {h.cuda_driver_version}")
        table("checks", ["check", "ok", "detail"], [[c.name, "yes" if c.ok else "NO", c.detail] for c in report.checks])
    if not report.ok:
        raise SystemExit(1)


COMMANDS = [serve_cmd, doctor_cmd]
