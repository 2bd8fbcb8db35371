import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Hash-cache entries and assembled models land in a temp dir, never in the user's cache."""
    cache = tmp_path_factory.mktemp("servepack-cache")
    monkeypatch.setenv("SERVEPACK_CACHE_DIR", str(cache))
    monkeypatch.delenv("SERVEPACK_VERIFY_MODEL", raising=False)
    return cache
