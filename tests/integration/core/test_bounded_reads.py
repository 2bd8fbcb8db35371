"""Every command that reads a file the user names reads it through `safepath.read_bounded`: a FIFO is refused at
once (no hang), /dev/zero by its type (no MemoryError), a file past the cap naming the cap; one line, exit 2.

Each command runs as a real process under a deadline and a 1 GiB address-space limit, so a regression shows as a
timeout or a crash here rather than a hung or swapping test run. All files are in scratch directories.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from servepack.errors import ModelError, UsageError
from servepack.safepath import read_bounded, size_text
from servepack.weights.hashcache import HashCache

DEADLINE_S = 60.0  # a hang is the failure this guards against; a refusal takes a second
KIB, MIB = 1 << 10, 1 << 20
FIXTURE = Path(__file__).parents[2] / "fixtures" / "registry" / "laguna_dgx_spark_record.json"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def _servepack(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SERVEPACK_CACHE_DIR": str(cwd / "cache"), "SERVEPACK_RESULTS_DIR": str(cwd / "results")}
    return subprocess.run([sys.executable, "-m", "servepack.cli.main", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=DEADLINE_S, preexec_fn=_limit_memory, check=False)


def _fifo(d: Path) -> Path:
    path = d / "hostile.json"
    os.mkfifo(path)
    return path


def _zero(d: Path) -> Path:
    path = d / "hostile.json"
    path.symlink_to("/dev/zero")
    return path


def _oversized(cap: int) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        path = d / "hostile.json"
        with path.open("wb") as fh:
            fh.truncate(cap + 1)  # sparse: one byte past the cap costs no disk
        return path
    return make


# (name, argv with {f} for the hostile file, the cap that command applies)
COMMANDS: list[tuple[str, list[str], int]] = [
    ("registry show", ["registry", "show", "{f}"], 4 * MIB),
    ("reproduce --dry-run", ["reproduce", "{f}", "--dry-run"], 4 * MIB),
    ("report --record", ["report", "{d}", "--record", "{f}"], 4 * MIB),
    ("compare", ["compare", "{d}", "{f}"], 4 * MIB),
    ("pack validate", ["pack", "validate", "{f}"], 1 * MIB),
    ("pack show", ["pack", "show", "{f}"], 1 * MIB),
    ("smoke score --case", ["smoke", "score", "--case", "{f}", "--response", "{d}/absent.json"], 1 * MIB),
    ("smoke score --response", ["smoke", "score", "--case", "agent_smoke/tool_json.weather_city", "--response",
                                "{f}"], 16 * MIB),
    ("tune --space", ["tune", "qwen2.5-coder-0.5b-cpu", "--space", "{f}", "--out", "{d}/never"], 64 * KIB),
]
KINDS: dict[str, tuple[Callable[[Path], Path] | None, str]] = {
    "fifo": (_fifo, "not a regular file (a FIFO (named pipe))"),
    "dev-zero": (_zero, "not a regular file (a character device)"),
    "over-cap": (None, "larger than "),
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize(("name", "argv", "cap"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_hostile_file_is_refused_at_once_in_one_line(tmp_path: Path, name: str, argv: list[str], cap: int,
                                                       kind: str) -> None:
    make, words = KINDS[kind]
    hostile = (make or _oversized(cap))(tmp_path)
    if kind == "over-cap":
        words = f"larger than {size_text(cap)}"
    before = sorted(p.name for p in tmp_path.iterdir())
    result = _servepack(*(a.format(f=hostile, d=tmp_path) for a in argv), cwd=tmp_path)
    err = result.stderr.strip()
    assert result.returncode == 2, (name, result.returncode, err)
    assert "Traceback" not in err and "internal error" not in err and "MemoryError" not in err
    lines = [line for line in err.splitlines() if line.startswith("servepack: error:")]
    assert len(lines) == 1 and len(err.splitlines()) == 1, err
    assert str(hostile) in lines[0] and words in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written beside it (no cache, no results)


def test_registry_import_refuses_each_hostile_file_and_imports_the_good_one(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    big = _oversized(4 * MIB)(tmp_path)
    db = tmp_path / "db" / "registry.sqlite3"
    result = _servepack("registry", "import", str(fifo), str(zero), str(big), str(FIXTURE), "--db", str(db),
                        cwd=tmp_path)
    assert result.returncode in (1, 2), result.stderr  # some files refused, the good one imported
    hint = "not a registry record, check the path"
    lines = result.stderr.splitlines()
    assert lines[:3] == [
        f"servepack: refused {fifo}: not a regular file (a FIFO (named pipe)); {hint}",
        f"servepack: refused {zero}: not a regular file (a character device); {hint}",
        f"servepack: refused {big}: larger than 4 MiB; {hint}"]
    assert len(lines) == 4 and lines[3].startswith("servepack: error: 3 of 4 files refused"), lines
    assert result.stdout.splitlines()[0] == f"imported recipe laguna-s-2-1-q4-k-m-dgx-spark-gb10-128gb-llama-cpp-tp1 " \
        f"from {FIXTURE}"


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_model_file_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    """Model files have no cap (GBs), but a FIFO or a device given as one is refused before a byte is read."""
    make, words = KINDS[kind]
    assert make is not None
    hostile = make(tmp_path)
    result = _servepack("twin", str(hostile), str(tmp_path / "out.gguf"), cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"servepack: error: {hostile}: {words}; give a GGUF model file"], result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostile.json"]
    with pytest.raises(ModelError, match="not a regular file"):
        HashCache(tmp_path / "hashes").sha256(hostile, force=True)


def test_registry_check_refuses_a_record_over_the_cap(tmp_path: Path) -> None:
    (tmp_path / "export" / "recipe").mkdir(parents=True)
    big = _oversized(4 * MIB)(tmp_path / "export" / "recipe")
    result = _servepack("registry", "check", str(tmp_path / "export"), cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"servepack: error: {big}: larger than 4 MiB; not a registry record, check the folder"], result.stderr


def test_the_reader_refuses_by_type_and_size_and_reads_a_good_file_exactly(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_bytes(b"x" * 1024)
    assert read_bounded(good, 1024, "fix it") == b"x" * 1024  # exactly at the cap: read whole
    with pytest.raises(UsageError, match=r"good.json: larger than 1,023 bytes; fix it$"):
        read_bounded(good, 1023, "fix it")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match=r"pipe: not a regular file \(a FIFO \(named pipe\)\); fix it$"):
        read_bounded(fifo, 1024, "fix it")
    with pytest.raises(UsageError, match=r"^/dev/zero: not a regular file \(a character device\)"):
        read_bounded(Path("/dev/zero"), 1024, "fix it")
    with pytest.raises(UsageError, match=r"not a regular file \(a folder\)"):
        read_bounded(tmp_path, 1024, "fix it")
    link = tmp_path / "link.json"
    link.symlink_to(good)
    assert read_bounded(link, 1024, "fix it") == b"x" * 1024  # a user's own link is followed by default
    with pytest.raises(UsageError, match="a symbolic link, not followed here"):
        read_bounded(link, 1024, "fix it", follow=False)
    with pytest.raises(UsageError, match=r"--space .*absent: no such file; fix it$"):
        read_bounded(tmp_path / "absent", 1024, "fix it", label=f"--space {tmp_path / 'absent'}")
    assert [size_text(n) for n in (16 << 20, 64 << 10, 300, 1 << 30)] == ["16 MiB", "64 KiB", "300 bytes", "1 GiB"]


def test_no_other_module_reads_user_files_its_own_way() -> None:
    """The four near-copies of a bounded reader (registry import, packs, tune spaces, smoke responses) and the
    receipt reader's are gone: each calls safepath.read_bounded, and no module reads `cap + 1` bytes by hand."""
    src = Path(__file__).parents[3] / "src" / "servepack"
    by_hand = re.compile(r"\.read\([A-Za-z_]+ \+ 1\)")
    assert [p.relative_to(src).as_posix() for p in src.rglob("*.py") if by_hand.search(p.read_text())] == [
        "safepath.py"]
    for module in ("registry/ingest.py", "packs/loader.py", "tune/space.py", "cli/smoke.py", "records/verify.py",
                   "registry/format/record.py", "smoke/cases.py", "redact/names.py", "records/claims.py"):
        text = (src / module).read_text()
        assert "read_bounded(" in text or "read_record_bytes(" in text or "read_result_bytes(" in text, module
