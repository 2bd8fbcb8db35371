"""llama.cpp RPC: the pack's [topology] (validation, the head's flags), binding rules, attribution, protocol."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from servepack.engine.base import EngineProcess, LaunchRequest
from servepack.engine.llamacpp import LlamaCppEngine
from servepack.engine.locate import EngineFacts
from servepack.engine.rpc import (
    RpcServerFacts,
    WorkerInfo,
    bind_ports,
    check_bind,
    check_protocols,
    check_reachable,
    fetch_info,
    head_snippet,
    rpc_head,
    rpc_server_argv,
    worker_argv,
)
from servepack.errors import EngineError, UsageError
from servepack.host.fingerprint import detected_hardware_id, fingerprint
from servepack.packs import load_pack
from servepack.packs.schema import RpcWorker, Topology
from servepack.records.policy import attribution, topology_attribution

TWO_WORKERS = """
[topology]
presets = ["{preset}"]
tensor_split = [1, 2, 2]
override_tensor = ["blk\\\\.0\\\\.ffn_.*=CPU"]
[[topology.workers]]
host = "127.0.0.1"
port = 50052
devices = ["CPU"]
[[topology.workers]]
host = "::1"
port = 50060
"""


def pack_with(tmp_path: Path, topology: str, *, flags: str = "") -> Path:
    """The embedded pack with a [topology] (and extra flags on its default preset)."""
    loaded = load_pack(None)
    text = Path(loaded.path).read_text()
    preset = loaded.pack.default_preset
    if flags:
        marker = f"[presets.{preset}.flags]\n"
        assert marker in text
        text = text.replace(marker, marker + flags + "\n")
    path = tmp_path / "rpc-pack.toml"
    path.write_text(text + "\n" + topology.replace("{preset}", preset))
    return path


def load_bad(tmp_path: Path, topology: str, match: str, **kw: str) -> None:
    with pytest.raises(UsageError, match=match):
        load_pack(str(pack_with(tmp_path, topology, **kw)))


def test_a_topology_loads_and_gives_the_head_its_flags(tmp_path: Path) -> None:
    pack = load_pack(str(pack_with(tmp_path, TWO_WORKERS))).pack
    topo = pack.topology_for(pack.default_preset)
    assert topo is not None and pack.topology_for("no-such-preset") is None
    assert [w.address for w in topo.workers] == ["127.0.0.1:50052", "[::1]:50060"]
    assert topo.head_args() == ["--rpc", "127.0.0.1:50052,[::1]:50060", "--tensor-split", "1,2,2",
                                "--override-tensor", "blk\\.0\\.ffn_.*=CPU"]


def test_the_head_argv_ends_with_the_topology_flags(tmp_path: Path) -> None:
    pack = load_pack(str(pack_with(tmp_path, TWO_WORKERS))).pack
    name, preset = pack.preset(None)
    facts = EngineFacts(name="llama-server", path=Path("/opt/llama-server"), chosen_by="flag", sha256="0" * 64,
                        version_text="v", package=None, package_version=None, commit=None, pin_match=True,
                        pin_reason="")
    req = LaunchRequest(facts=facts, pin=pack.engine, model_path=Path("/m.gguf"), preset=preset, host="127.0.0.1",
                        port=8080, log_dir=tmp_path, health_timeout_s=1, topology=pack.topology_for(name))
    argv = LlamaCppEngine().argv(req)
    assert argv[:3] == ["/opt/llama-server", "--model", "/m.gguf"]
    assert argv[-6:] == ["--rpc", "127.0.0.1:50052,[::1]:50060", "--tensor-split", "1,2,2", "--override-tensor",
                         "blk\\.0\\.ffn_.*=CPU"]
    single = LaunchRequest(facts=facts, pin=pack.engine, model_path=Path("/m.gguf"), preset=preset,
                           host="127.0.0.1", port=8080, log_dir=tmp_path, health_timeout_s=1)
    assert "--rpc" not in LlamaCppEngine().argv(single)


@pytest.mark.parametrize(("workers", "match"), [
    ('host = "127.0.0.1"\nport = 65535', "port"),
    ('host = "127.0.0.1"\nport = -1', "port"),
    ('host = "http://10.0.0.2"', "neither an IP address nor a host name"),
    ('host = "10.0.0.2:50052"', "neither an IP address nor a host name"),
    ('host = "bad host"', "neither an IP address nor a host name"),
    ('port = 0', "port 0 .* only for a worker the run starts"),
    ('host = "10.0.0.2"\nstart = true\n', "start = true only on loopback"),
    ('host = "10.0.0.2"', "not on loopback: llama.cpp's RPC is unauthenticated.*i_understand_rpc_is_unauthenticated"),
    ('host = "gpu-box.lan"', "not on loopback"),
    ('cache_dir = "/tmp/c"', "apply to a worker the run starts"),
    ('devices = ["CUDA0; rm"]', "devices"),
])
def test_bad_workers_are_refused_with_the_field(tmp_path: Path, workers: str, match: str) -> None:
    load_bad(tmp_path, f'[topology]\npresets = ["{{preset}}"]\n[[topology.workers]]\n{workers}\n', match)


def test_duplicate_workers_and_port_plus_one_collisions_are_refused(tmp_path: Path) -> None:
    dup = '[topology]\npresets = ["{preset}"]\n' + '[[topology.workers]]\nport = 50052\n' * 2
    load_bad(tmp_path, dup, r"port 50052 \(rpc\) is already used by worker 127\.0\.0\.1:50052")
    plus_one = ('[topology]\npresets = ["{preset}"]\n[[topology.workers]]\nport = 50052\n'
                '[[topology.workers]]\nport = 50053\n')
    load_bad(tmp_path, plus_one, r"port 50053 \(rpc\) is already used by worker 127\.0\.0\.1:50052 \(fingerprint\)")
    other_host = ('[topology]\npresets = ["{preset}"]\ni_understand_rpc_is_unauthenticated = true\n'
                  '[[topology.workers]]\nport = 50052\n[[topology.workers]]\nhost = "10.0.0.2"\nport = 50052\n')
    assert load_pack(str(pack_with(tmp_path, other_host))).pack.topology is not None


def test_topology_references_and_flags(tmp_path: Path) -> None:
    load_bad(tmp_path, '[topology]\npresets = ["nope"]\n[[topology.workers]]\n', "topology.presets names preset 'nope'")
    load_bad(tmp_path, '[topology]\npresets = ["{preset}"]\nworkers = []\n', "workers")
    load_bad(tmp_path, '[topology]\npresets = ["{preset}"]\ntensor_split = [0, 0]\n[[topology.workers]]\n',
             "at least one proportion")
    load_bad(tmp_path, '[topology]\npresets = ["{preset}"]\noverride_tensor = ["no-equals"]\n[[topology.workers]]\n',
             "override_tensor")
    load_bad(tmp_path, "", "flag 'rpc': an RPC split is described in \\[topology\\]", flags='rpc = "10.0.0.2:50052"')
    load_bad(tmp_path, "", "flag 'tensor-split'", flags='tensor-split = "1,1"')


def test_a_public_bind_is_refused_without_the_opt_in() -> None:
    assert check_bind("127.0.0.1", False) == "127.0.0.1"
    assert check_bind("::1", False) == "::1"
    assert check_bind("localhost", False) == "localhost"
    for host in ("0.0.0.0", "10.0.0.2", "::", "gpu-box.lan"):
        with pytest.raises(UsageError, match=r"no authentication.*--i-understand-rpc-is-unauthenticated"):
            check_bind(host, False)
        assert check_bind(host, True)
    with pytest.raises(UsageError, match="--host: host 'a b'"):
        check_bind("a b", True)


def test_worker_argv_and_what_the_head_needs() -> None:
    w = RpcWorker(host="127.0.0.1", port=50100, devices=["CPU"], threads=1, cache_dir="/c", start=True)
    argv = worker_argv(Path("/b/ggml-rpc-server"), w)
    assert argv[1:] == ["-m", "servepack.cli.main", "worker", "--host", "127.0.0.1", "--port", "50100",
                        "--rpc-server", "/b/ggml-rpc-server", "--device", "CPU", "--threads", "1", "--cache-dir", "/c"]
    assert rpc_server_argv(Path("/r"), "::1", 5, ["CUDA0", "CUDA1"], None, True) == [
        "/r", "--host", "::1", "--port", "5", "--device", "CUDA0,CUDA1", "--cache"]
    snippet = head_snippet("10.0.0.2", 50052, ["CUDA0"])
    assert 'host = "10.0.0.2"' in snippet and "i_understand_rpc_is_unauthenticated = true" in snippet
    assert "i_understand" not in head_snippet("127.0.0.1", 50052, [])


def test_free_ports_are_bound_for_workers_the_run_starts() -> None:
    topo = Topology(presets=["p"], workers=[RpcWorker(port=0, start=True), RpcWorker(port=0, start=True),
                                            RpcWorker(port=50070)])
    bound = bind_ports(topo)
    ports = [w.port for w in bound.workers]
    assert ports[2] == 50070 and all(p > 0 for p in ports) and ports[0] != ports[1]


def test_an_unreachable_worker_is_named(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        w = RpcWorker(port=port)
        with pytest.raises(EngineError, match=rf"RPC worker 127\.0\.0\.1:{port} is not reachable.*servepack worker"):
            check_reachable([w], timeout_s=1)
        info, why = fetch_info(w, timeout_s=1)
        assert info is None and why is not None and f":{port + 1}/fingerprint" in why


def _info(proto: str | None) -> WorkerInfo:
    return WorkerInfo(servepack_version="t", endpoint="127.0.0.1:1", host=fingerprint(), started_at=0.0,
                      rpc_server=RpcServerFacts(path="/r", sha256="a" * 64, argv=["/r"], pid=1, protocol=proto))


def test_workers_must_speak_the_heads_protocol() -> None:
    w = RpcWorker(port=50052)
    check_protocols([(w, _info("7.0.0")), (w, None)], "7.0.0")
    check_protocols([(w, _info("6.0.0"))], None)  # the head's protocol unknown: nothing to compare
    with pytest.raises(EngineError, match=r"127\.0\.0\.1:50052 speaks RPC protocol 6\.0\.0, the head's build 7\.0\.0"):
        check_protocols([(w, _info("6.0.0"))], "7.0.0")


def test_attribution_names_every_host_and_an_unidentified_one_blocks_claims() -> None:
    loaded = load_pack(None)
    fp = fingerprint()
    hw = attribution(fp, loaded)
    me = detected_hardware_id(fp)
    head = EngineProcess(role="head", host="127.0.0.1", argv=["h"], binary_sha256=None, fingerprint=fp)
    w1 = EngineProcess(role="rpc-worker", host="127.0.0.1", argv=["r"], binary_sha256="a", fingerprint=fp,
                       endpoint="127.0.0.1:50052")
    w2 = EngineProcess(role="rpc-worker", host="10.0.0.2", argv=[], binary_sha256=None, endpoint="10.0.0.2:50052")
    assert topology_attribution(hw, [head]) == (hw, [])  # one host: unchanged
    full, blockers = topology_attribution(hw, [head, w1])
    assert full.attributed_id == f"rpc.{me}.{me}" and blockers == []
    assert [h.role for h in full.topology] == ["head", "rpc-worker"] and full.topology[1].endpoint == "127.0.0.1:50052"
    part, blockers = topology_attribution(hw, [head, w1, w2])
    assert part.attributed_id == f"rpc.{me}.{me}.unidentified"
    assert blockers == ["hardware: rpc-worker 10.0.0.2:50052 not identified (it served no fingerprint; run it with "
                        "`servepack worker`)"]


def test_a_topology_takes_its_head_from_the_pinned_rpc_build_or_says_how_to_make_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVEPACK_LLAMA_SERVER", raising=False)
    loaded = load_pack(str(pack_with(tmp_path, TWO_WORKERS)))
    with pytest.raises(EngineError, match=r"built with -DGGML_RPC=ON.*servepack engine build --from-pin --rpc"):
        rpc_head(loaded, None, tmp_path / "empty-cache")
    assert rpc_head(loaded, Path("/my/llama-server"), tmp_path / "empty-cache") == Path("/my/llama-server")
    monkeypatch.setenv("SERVEPACK_LLAMA_SERVER", "/env/llama-server")
    assert rpc_head(loaded, None, tmp_path / "empty-cache") is None  # the environment's binary is located as usual


def test_the_session_reaches_the_split_through_the_engine_seam(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ast

    import servepack.plan
    import servepack.session
    from servepack.engine.catalog import get_engine

    monkeypatch.delenv("SERVEPACK_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("SERVEPACK_CACHE_DIR", str(tmp_path / "empty-cache"))  # no pinned RPC build in it
    loaded = load_pack(str(pack_with(tmp_path, TWO_WORKERS)))
    topo = loaded.pack.topology
    assert topo is not None
    started = topo.model_copy(update={"workers": [*topo.workers, RpcWorker(port=0, start=True)]})
    split = get_engine("llama.cpp").split(loaded, started, Path("/my/llama-server"))
    assert split.head == Path("/my/llama-server")
    ports = [w.port for w in split.topology.workers]
    assert ports[:2] == [50052, 50060] and ports[2] > 0  # the worker the run starts got a free port
    with pytest.raises(EngineError, match=r"built with -DGGML_RPC=ON"):
        get_engine("llama.cpp").split(loaded, topo, None)
    for name in ("vllm", "attach"):
        with pytest.raises(UsageError, match=rf"engine {name!r} serves on one host"):
            get_engine(name).split(loaded, topo, None)
    for module in (servepack.session, servepack.plan):  # the plan splits, the session launches
        tree = ast.parse(Path(module.__file__ or "").read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not {m for m in imported if m.startswith("servepack.engine.rpc")}  # only through the Engine seam
