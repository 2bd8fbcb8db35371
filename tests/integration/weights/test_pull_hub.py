"""`servepack pull` against a loopback Hub stand-in: the real hf_hub_download code path, selected by HF_ENDPOINT."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub.constants
import pytest
from weights_fake_hub import FakeHub, FakeRepo, gguf_like, running_hub, write_pack

from servepack.errors import ModelError
from servepack.packs import load_pack
from servepack.weights.hf import ChecksumMismatch, pull_model
from servepack.weights.resolve import hf_expected_path

REPO = "acme/Tiny-GGUF"
MIRROR = "someone/Tiny-GGUF-mirror"
FILE = "tiny-Q4_K_M.gguf"
COMMIT = "a" * 40
MIRROR_COMMIT = "b" * 40
DATA = gguf_like(300_000)
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    with running_hub(monkeypatch, tmp_path / "hf-cache", {REPO: FakeRepo(COMMIT, {FILE: DATA})}) as h:
        yield h


def pack(tmp_path: Path, **kw: object) -> Path:
    args: dict[str, object] = {"repo": REPO, "file": FILE, "revision": COMMIT, "sha256": SHA}
    args.update(kw)
    return write_pack(tmp_path / "pack.toml", **args)  # type: ignore[arg-type]


def test_pull_downloads_verifies_and_lands_where_runs_look(hub: FakeHub, tmp_path: Path) -> None:
    loaded = load_pack(str(pack(tmp_path, mirror=MIRROR)))
    lines: list[str] = []
    result = pull_model(loaded, progress=lines.append)
    (f,) = result.files
    assert f.action == "downloaded" and f.sha256 == SHA and f.verified and f.claimable
    assert f.path.read_bytes() == DATA
    # the HF cache layout with a commit revision is what resolve_model expects
    assert f.path == hf_expected_path(loaded.pack.model.source, None)  # type: ignore[arg-type]
    assert f.commit == COMMIT
    assert result.endpoint == hub.endpoint
    assert any("MB/s" in ln and "100%" in ln for ln in lines), lines
    assert hub.gets(FILE) == [None]
    assert not any(MIRROR in p for _, p, _ in hub.log), "the mirror is tried only when the primary fails"
    again = pull_model(loaded)
    assert again.files[0].action == "cached"
    assert hub.gets(FILE) == [None], "a verified commit-pinned file is never fetched twice"


def test_pull_resumes_after_the_connection_drops_mid_body(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the client keeps whole chunks (10 MB by default); small ones let a 300 kB file break mid-way
    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 32 * 1024)
    hub.drop_once[FILE] = 120_000
    result = pull_model(load_pack(str(pack(tmp_path))))
    assert result.files[0].sha256 == SHA and result.files[0].path.read_bytes() == DATA
    first, second = hub.gets(FILE)
    assert first is None and second is not None
    resumed_at = int(second.removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_at <= 120_000, "the second GET resumes where the first broke, not from zero"


def test_wrong_sha256_keeps_bad_bytes_aside_and_exits_1(hub: FakeHub, tmp_path: Path) -> None:
    local = tmp_path / "models"
    local.mkdir()
    (local / "notes.txt").write_text("mine")
    stale = b"an older download of something else"
    (local / FILE).write_bytes(stale)
    pin = "0" * 64
    with pytest.raises(ChecksumMismatch) as err:
        pull_model(load_pack(str(pack(tmp_path, sha256=pin))), local_dir=local)
    assert err.value.exit_code == 1
    assert SHA in str(err.value) and pin in str(err.value) and "\n" not in str(err.value)
    assert (local / "notes.txt").read_text() == "mine"
    assert not (local / FILE).exists()
    assert (local / f"{FILE}.bad-{SHA[:12]}").read_bytes() == DATA
    stale_sha = hashlib.sha256(stale).hexdigest()
    assert (local / f"{FILE}.bad-{stale_sha[:12]}").read_bytes() == stale, "what the user had is kept"


def test_mirror_is_used_when_the_primary_fails_and_only_with_the_pinned_bytes(hub: FakeHub, tmp_path: Path) -> None:
    hub.repos.pop(REPO)
    hub.repos[MIRROR] = FakeRepo(MIRROR_COMMIT, {FILE: DATA})
    loaded = load_pack(str(pack(tmp_path, mirror=MIRROR)))
    result = pull_model(loaded)
    (f,) = result.files
    assert f.action == "mirror" and f.repo == MIRROR and f.sha256 == SHA
    assert f.path == hf_expected_path(loaded.pack.model.source, None)  # type: ignore[arg-type]
    assert f.path.read_bytes() == DATA
    assert any("mirror" in n for n in f.notes)


def test_mirror_with_other_bytes_is_refused(hub: FakeHub, tmp_path: Path) -> None:
    hub.repos.pop(REPO)
    other = gguf_like(50_000, seed=7)
    hub.repos[MIRROR] = FakeRepo(MIRROR_COMMIT, {FILE: other})
    loaded = load_pack(str(pack(tmp_path, mirror=MIRROR)))
    with pytest.raises(ChecksumMismatch, match=hashlib.sha256(other).hexdigest()):
        pull_model(loaded)
    assert not hf_expected_path(loaded.pack.model.source, None).exists()  # type: ignore[arg-type]


def test_primary_failure_without_mirror_is_one_line(hub: FakeHub, tmp_path: Path) -> None:
    hub.repos.pop(REPO)
    with pytest.raises(ModelError) as err:
        pull_model(load_pack(str(pack(tmp_path))))
    assert "cannot download" in str(err.value) and REPO in str(err.value) and "\n" not in str(err.value)


def test_not_enough_disk_refuses_before_any_request(hub: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(ModelError) as err:
        pull_model(load_pack(str(pack(tmp_path, min_free_gb=1e6))))
    msg = str(err.value)
    assert "GB free at" in msg and "needs ≥ 1,000,000.0 GB" in msg and "pull.min_free_gb" in msg
    assert hub.log == []


def test_offline_uses_the_verified_cache_and_otherwise_says_so(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = load_pack(str(pack(tmp_path)))
    pull_model(loaded)
    hub.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    f = pull_model(loaded).files[0]
    assert f.action == "cached" and f.sha256 == SHA
    with pytest.raises(ModelError) as err:
        pull_model(loaded, local_dir=tmp_path / "empty")
    assert "offline (HF_HUB_OFFLINE=1)" in str(err.value) and "\n" not in str(err.value)


def test_network_down_uses_the_verified_cache(hub: FakeHub, tmp_path: Path) -> None:
    loaded = load_pack(str(pack(tmp_path)))
    pull_model(loaded)
    hub.stop()
    assert pull_model(loaded).files[0].action == "cached"


def test_branch_revision_pulls_but_is_marked(hub: FakeHub, tmp_path: Path) -> None:
    f = pull_model(load_pack(str(pack(tmp_path, revision="main")))).files[0]
    assert f.sha256 == SHA and not f.revision_is_commit and not f.claimable
    assert f.commit == COMMIT and f.path.parent.name == COMMIT
    assert any("branch" in n for n in f.notes)


def test_with_draft_pulls_the_extra_files(hub: FakeHub, tmp_path: Path) -> None:
    draft = gguf_like(40_000, seed=3)
    hub.repos[REPO].files["tiny-draft.gguf"] = draft
    extra = f'''
[[model.extra]]
name = "draft"
file = "tiny-draft.gguf"
sha256 = "{hashlib.sha256(draft).hexdigest()}"
[model.extra.source]
kind = "hf"
repo = "{REPO}"
file = "tiny-draft.gguf"
revision = "{COMMIT}"
'''
    loaded = load_pack(str(pack(tmp_path, extra=extra)))
    local = tmp_path / "models"
    assert [f.name for f in pull_model(loaded, local_dir=local).files] == ["model"]
    files = pull_model(loaded, local_dir=local, with_draft=True).files
    assert [(f.name, f.action) for f in files] == [("model", "cached"), ("draft", "downloaded")]
    assert (local / "tiny-draft.gguf").read_bytes() == draft
