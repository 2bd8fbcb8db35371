"""`servepack packs`, `servepack pack show ID`, `servepack pack validate FILE`."""

from __future__ import annotations

import re
from pathlib import Path

import click

from servepack.cli._options import allow_server_flag_option
from servepack.cli.render import echo, echo_block, print_json, table
from servepack.engine.catalog import ENGINES
from servepack.errors import PackError, UsageError
from servepack.packs import load_pack, load_pack_file, shipped_pack_paths
from servepack.packs.flag_policy import OPT_IN, allowed_now, check_pack
from servepack.packs.loader import MAX_PACK_BYTES
from servepack.redact import redact_pack, redact_pack_text
from servepack.safepath import read_bounded
from servepack.tune.space import build_space


@click.command("packs")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
def packs_cmd(as_json: bool) -> None:
    """List the packs that ship with servepack."""
    rows = []
    for pack_id in sorted(shipped_pack_paths()):
        p = load_pack(pack_id).pack
        rows.append({"id": p.id, "hardware": p.hardware.id, "model": f"{p.model.name} {p.model.quant}",
                     "presets": list(p.presets), "description": p.description})
    if as_json:
        print_json(rows)
        return
    for r in rows:
        echo(f"{r['id']}\t{r['hardware']}\t{r['model']}\t{', '.join(r['presets'])}")


@click.group("pack")
def pack_group() -> None:
    """Show or validate one pack."""


@pack_group.command("show")
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="Print the validated pack as JSON.")
@click.option("--reveal-secrets", is_flag=True,
              help="Print secret values (a preset's api-key, hf-token, ...) as the file holds them; by default each "
                   "is shown as <redacted>, so the output can go into a bug report.")
def pack_show(ref: str, as_json: bool, reveal_secrets: bool) -> None:
    """Print a pack (shipped id or file path): its file, then its presets.

    A secret value (a flag named api-key, hf-token, ...; servepack.redact) is shown as <redacted> unless
    --reveal-secrets is given."""
    loaded = load_pack(ref)
    p = loaded.pack if reveal_secrets else redact_pack(loaded.pack)
    if as_json:
        print_json(p.model_dump(mode="json"))
        return
    text = read_bounded(loaded.path, MAX_PACK_BYTES, "give the path of a pack .toml file").decode("utf-8")
    echo_block(text if reveal_secrets else redact_pack_text(text, loaded.pack))
    table(f"{p.id} — presets", ["preset", "role", "flags"],
          [[n, pr.role, " ".join(f"{k}={v}" for k, v in pr.flags.items())] for n, pr in p.presets.items()])


_SPACE_PREFIX = re.compile(r"^space( \(\[tune\]\))?: ")


@pack_group.command("validate")
@click.argument("file", type=click.Path(path_type=Path))
@allow_server_flag_option
def pack_validate(file: Path) -> None:
    """Check a pack file; prints `ok <id> <sha256>` or one line naming the field to fix.

    A preset or [tune] flag that reaches this host (tools, host files, downloads, ...) fails unless its family is
    allowed with --allow-server-flag, as it would at launch."""
    loaded = load_pack_file(file)
    if loaded.pack.engine.name not in ENGINES:
        raise PackError(f"{file}: field engine.name: {loaded.pack.engine.name!r} is not a known engine; "
                        f"choose one of {sorted(ENGINES)}")
    if loaded.pack.tune:  # the table's own rules first (a flag servepack sets is named as such there)
        try:
            build_space(loaded.pack.tune, "[tune]")
        except UsageError as exc:
            why = _SPACE_PREFIX.sub("", str(exc))
            raise PackError(f"{file}: field tune: {why}") from None
    try:
        families = check_pack(loaded.pack, allowed_now(), str(file))
    except UsageError as exc:
        raise PackError(str(exc)) from None
    used = f" (needs {' '.join(f'{OPT_IN} {f}' for f in families)})" if families else ""
    echo(f"ok {loaded.pack.id} sha256 {loaded.sha256}{used}")


COMMANDS = [packs_cmd, pack_group]
