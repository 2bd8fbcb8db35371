"""Issue 11, item 11: a results directory that is full, nearly full or read-only, on a small tmpfs mounted in a
private mount namespace (`unshare -rm`; skipped where user namespaces are unavailable). Never the host disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from system_deps import require


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                              capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(autouse=True, scope="module")
def _tmpfs_in_a_user_namespace() -> None:
    require("unshare")  # util-linux: fails under make test when missing
    if not _unshare_works():
        pytest.skip("needs `unshare -rm` and tmpfs mounts (user namespaces: the kernel's, not a package)")

# Runs inside the namespace: mounts are private, so the tmpfs and the run on it exist only in here.
SCENARIO = textwrap.dedent('''
    import json, os, sys
    from pathlib import Path
    from click.testing import CliRunner
    import servepack.store as store
    from servepack.cli.main import cli

    cfg = json.loads(sys.argv[1])
    mnt = Path(cfg["mnt"])
    # the quiet host the suite's watches read (tests/conftest.py): this process is not pytest's
    sys.path.insert(0, cfg["tests"])
    import servepack.host.contention as contention
    from quiet_host import QuietHost
    contention.ProcReader = QuietHost
    if cfg.get("min_free_bytes") is not None:
        store.MIN_FREE_BYTES = cfg["min_free_bytes"]
    if cfg.get("fill_after_first_batch"):
        from servepack.bench import runner
        original = runner._Run.record
        state = {"filled": False}

        def record(self, batch):
            original(self, batch)
            if not state["filled"] and not all(s.warmup for s in batch):
                state["filled"] = True
                with open(mnt / "filler", "wb") as fh:  # the disk fills up behind the run's back
                    try:
                        while True:
                            fh.write(b"\\0" * 65536)
                            fh.flush()
                    except OSError:
                        pass

        runner._Run.record = record

    def fill():  # the disk fills up behind the run's back
        with open(mnt / "filler", "wb") as fh:
            try:
                while True:
                    fh.write(b"\\0" * 65536)
                    fh.flush()
            except OSError:
                pass

    if cfg.get("fill_after_first_point"):  # capacity: once the first point's requests and statistics are written
        original_write = store.JsonlWriter.write
        state = {"filled": False}

        def write(self, record):
            original_write(self, record)
            if not state["filled"] and self.path.name == "capacity_points.jsonl":
                state["filled"] = True
                fill()

        store.JsonlWriter.write = write
    if cfg.get("fill_before_evidence"):  # the sweep and its receipt written; MEASURED.md and the page not yet
        import servepack.pipeline.evidence as evidence
        original_measured = evidence.write_measured

        def write_measured(results_dir, pack):
            fill()
            return original_measured(results_dir, pack)

        evidence.write_measured = write_measured
    runner_ = CliRunner()
    res = runner_.invoke(cli, cfg["argv"])
    out = {"code": res.exit_code, "output": res.output, "exception": repr(res.exception)}
    run = Path(cfg["run"])
    out["files"] = sorted(p.name for p in run.iterdir()) if run.is_dir() else None
    if cfg.get("verify"):
        v = runner_.invoke(cli, ["verify", str(run), "--json"])
        out["verify_code"], out["verify_output"] = v.exit_code, v.output
    if run.is_dir() and (run / "requests.jsonl").is_file():
        out["requests"] = len((run / "requests.jsonl").read_text(errors="replace").splitlines())
    for name in ("capacity_requests.jsonl", "capacity_points.jsonl"):
        if run.is_dir() and (run / name).is_file():
            raw = (run / name).read_bytes()
            lines, bad = raw.split(b"\\n"), 0
            for ln in lines[:-1]:
                try:
                    json.loads(ln)
                except ValueError:
                    bad += 1
            # every record whole and parseable, the file ending at a record's end (no torn last line)
            out[name] = {"records": len(lines) - 1, "bad": bad, "tail": lines[-1].decode(errors="replace")}
    if run.is_dir() and (run / "capacity.json").is_file():
        out["capacity"] = json.loads((run / "capacity.json").read_text())
    print("RESULT " + json.dumps(out))
''')


def _scenario(tmp_path: Path, mount_opts: str, cfg: dict) -> dict:  # type: ignore[type-arg]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO)
    cfg = {**cfg, "mnt": str(mnt), "tests": str(Path(__file__).parents[2])}
    env = {**os.environ, "SERVEPACK_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o {mount_opts} tmpfs "$0" && '
                           f'exec "$1" "$2" "$3"', str(mnt), sys.executable, str(script), json.dumps(cfg)],
                          capture_output=True, text=True, timeout=240, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, f"scenario did not finish: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    result: dict = json.loads(line[len("RESULT "):])  # type: ignore[type-arg]
    return result


def _bench_argv(pack: Path, server_bin: Path, out: Path, *extra: str) -> list[str]:
    return ["bench", str(pack), "--server-bin", str(server_bin), "--prompt-tokens", "40", "--gen-tokens", "200",
            "--samples", "8", "--out", str(out), *extra]


def _error_lines(output: str) -> list[str]:
    return [x for x in output.splitlines() if x.startswith("servepack: ")]


def test_a_nearly_full_results_disk_is_refused_before_launch(tiny_pack: Path, fake_server_bin: Path,
                                                             tmp_path: Path) -> None:
    run = tmp_path / "mnt" / "run"
    r = _scenario(tmp_path, "size=1m", {"argv": _bench_argv(tiny_pack, fake_server_bin, run), "run": str(run)})
    assert r["code"] == 2, r
    (err,) = _error_lines(r["output"])
    assert "has 1.0 MiB free; a run needs at least 64 MiB" in err and "Traceback" not in r["output"]
    assert "llama-server pid" not in r["output"]  # nothing was launched
    assert r["files"] is None  # and the directory made for the run was removed again


def test_a_read_only_results_root_is_refused_before_launch(tiny_pack: Path, fake_server_bin: Path,
                                                           tmp_path: Path) -> None:
    run = tmp_path / "mnt" / "run"
    r = _scenario(tmp_path, "size=8m,ro", {"argv": _bench_argv(tiny_pack, fake_server_bin, run), "run": str(run)})
    assert r["code"] == 2, r
    (err,) = _error_lines(r["output"])
    assert "Read-only file system" in err and "llama-server pid" not in r["output"]


def test_a_roomy_results_disk_runs_to_a_complete_receipt(tiny_pack: Path, fake_server_bin: Path,
                                                          tmp_path: Path) -> None:
    run = tmp_path / "mnt" / "run"
    r = _scenario(tmp_path, "size=16m", {"argv": _bench_argv(tiny_pack, fake_server_bin, run), "run": str(run),
                                         "min_free_bytes": 1 << 20, "verify": True})
    assert r["code"] == 0, r
    assert "receipt.json" in r["files"] and r["requests"] == 8 and r["verify_code"] == 0
    assert json.loads(r["verify_output"][r["verify_output"].index("{"):])["status"] == "complete"


def test_disk_full_mid_run_stops_tears_down_and_leaves_a_receipt_verify_reads(tiny_pack: Path, fake_server_bin: Path,
                                                                             tmp_path: Path) -> None:
    run = tmp_path / "mnt" / "run"
    r = _scenario(tmp_path, "size=4m", {"argv": _bench_argv(tiny_pack, fake_server_bin, run), "run": str(run),
                                        "min_free_bytes": 1 << 20, "fill_after_first_batch": True, "verify": True})
    assert r["code"] == 1, r
    print(r["output"], r["verify_output"])
    assert "Traceback" not in r["output"] and "internal error" not in r["output"]
    (err,) = _error_lines(r["output"])
    assert "(the disk is full); measuring stopped, what was already written is kept" in err
    assert 1 <= r["requests"] < 8  # measuring stopped at the first failed write
    assert "server.log" in r["files"] and "requests.jsonl" in r["files"]
    # The run's own directory could not take the receipt: it went where verify looks for it.
    receipts = list((tmp_path / "cache" / "unwritten-receipts").glob("*.json"))
    assert len(receipts) == 1 and receipts[0].name in "".join(r["output"].split())  # rich wraps long lines
    receipt = json.loads(receipts[0].read_text())
    assert receipt["status"] == "failed" and "the disk is full" in receipt["error"]
    assert "requests.jsonl" in receipt["files"]
    assert r["verify_code"] == 0, r["verify_output"]
    report = json.loads(r["verify_output"][r["verify_output"].index("{"):])
    assert report["receipt_elsewhere"] and report["status"] == "failed"
    pid = int(r["output"].split("llama-server pid ")[1].split()[0])
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]


def _capacity_argv(pack: Path, server_bin: Path, out: Path, *extra: str) -> list[str]:
    return ["capacity", str(pack), "--server-bin", str(server_bin), "--slo", "ttft_p90=5s", "--max-concurrency",
            "2", "--requests", "40", "--prompt-tokens", "30", "--gen-tokens", "8", "--out", str(out), *extra]


def test_capacity_on_a_nearly_full_results_disk_is_refused_before_launch(tiny_pack: Path, fake_server_bin: Path,
                                                                         tmp_path: Path) -> None:
    run = tmp_path / "mnt" / "run"
    r = _scenario(tmp_path, "size=1m", {"argv": _capacity_argv(tiny_pack, fake_server_bin, run), "run": str(run)})
    assert r["code"] == 2, r
    (err,) = _error_lines(r["output"])
    assert "has 1.0 MiB free; a run needs at least 64 MiB" in err and "Traceback" not in r["output"]
    assert "llama-server pid" not in r["output"] and r["files"] is None


def test_capacity_on_a_roomy_disk_writes_every_file_measured_and_the_page(tiny_pack: Path, fake_server_bin: Path,
                                                                          tmp_path: Path) -> None:
    run = tmp_path / "mnt" / "run"
    r = _scenario(tmp_path, "size=16m", {"argv": _capacity_argv(tiny_pack, fake_server_bin, run), "run": str(run),
                                         "min_free_bytes": 1 << 20, "verify": True})
    assert r["code"] == 0, r
    assert {"capacity.json", "capacity_requests.jsonl", "capacity_points.jsonl", "capacity_requests.csv",
            "MEASURED.md", "report.html", "receipt.json"} <= set(r["files"])
    assert r["capacity"]["status"] == "complete" and r["verify_code"] == 0, r["verify_output"]
    n = sum(p["n"] for p in r["capacity"]["points"])
    assert r["capacity_requests.jsonl"] == {"records": n, "bad": 0, "tail": ""}


def test_capacity_disk_full_mid_sweep_keeps_whole_records_and_leaves_a_receipt(tiny_pack: Path,
                                                                               fake_server_bin: Path,
                                                                               tmp_path: Path) -> None:
    run = tmp_path / "mnt" / "run"
    r = _scenario(tmp_path, "size=4m", {"argv": _capacity_argv(tiny_pack, fake_server_bin, run), "run": str(run),
                                        "min_free_bytes": 1 << 20, "fill_after_first_point": True, "verify": True})
    assert r["code"] == 1, r
    assert "Traceback" not in r["output"] and "internal error" not in r["output"]
    (err,) = _error_lines(r["output"])
    assert "cannot write capacity_requests.jsonl" in err
    assert "(the disk is full); measuring stopped, what was already written is kept" in err
    # the first point is kept whole: its statistics and every one of its requests, each a complete JSON record;
    # the second point's batch, which met the full disk, left no torn line behind
    assert r["capacity_points.jsonl"] == {"records": 1, "bad": 0, "tail": ""}
    requests = r["capacity_requests.jsonl"]
    assert requests["bad"] == 0 and requests["tail"] == "" and requests["records"] >= 1
    receipts = list((tmp_path / "cache" / "unwritten-receipts").glob("*.json"))
    assert len(receipts) == 1
    receipt = json.loads(receipts[0].read_text())
    assert receipt["status"] == "failed" and "the disk is full" in receipt["error"]
    assert {"capacity_requests.jsonl", "capacity_points.jsonl"} <= set(receipt["files"])
    assert r["verify_code"] == 0, r["verify_output"]
    pid = int(r["output"].split("llama-server pid ")[1].split()[0])
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]


def test_capacity_disk_full_before_measured_and_the_page_says_so_and_keeps_the_run(tiny_pack: Path,
                                                                                    fake_server_bin: Path,
                                                                                    tmp_path: Path) -> None:
    run = tmp_path / "mnt" / "run"
    r = _scenario(tmp_path, "size=8m", {"argv": _capacity_argv(tiny_pack, fake_server_bin, run), "run": str(run),
                                        "min_free_bytes": 1 << 20, "fill_before_evidence": True, "verify": True})
    assert "Traceback" not in r["output"] and "internal error" not in r["output"]
    assert r["code"] == 1, r["output"] + repr(r["files"])
    (err,) = _error_lines(r["output"])
    assert "the disk is full" in err and "MEASURED.md" in err and f"servepack report {run}" in err
    # the sweep and its receipt are whole; only the derived pages are missing, and no half-written one is left
    assert r["capacity"]["status"] == "complete" and r["verify_code"] == 0, r["verify_output"]
    assert "receipt.json" in r["files"] and "MEASURED.md" not in r["files"] and "report.html" not in r["files"]
    assert not [f for f in r["files"] if f.startswith(".")]  # no half-written temp file left


def test_run_disk_full_before_measured_and_the_page_is_one_line_and_exit_1(tiny_pack: Path, fake_server_bin: Path,
                                                                          tmp_path: Path) -> None:
    # `run` wrote its pages without a guard: a full disk there was an internal error (exit 70, --debug hint)
    run = tmp_path / "mnt" / "run"
    r = _scenario(tmp_path, "size=8m", {"argv": ["run", str(tiny_pack), "--server-bin", str(fake_server_bin),
                                                 "--no-smoke", "--samples", "2", "--prompt-tokens", "40",
                                                 "--gen-tokens", "20", "--out", str(run)],
                                        "run": str(run), "min_free_bytes": 1 << 20, "fill_before_evidence": True,
                                        "verify": True})
    assert "Traceback" not in r["output"] and "internal error" not in r["output"]
    assert r["code"] == 1, r["output"]
    (err,) = _error_lines(r["output"])
    assert "the disk is full" in err and "MEASURED.md" in err and f"servepack report {run}" in err
    assert "receipt.json" in r["files"] and "MEASURED.md" not in r["files"] and r["verify_code"] == 0
    assert not [f for f in r["files"] if f.startswith(".")]
