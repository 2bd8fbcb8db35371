"""The shipped Laguna pack and the seed record name different bytes of one model instance; the pack says why."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servepack.packs.loader import load_pack
from servepack.registry.format import load_record
from servepack.reproduce.protocol import record_facts

SEEDS = Path("/work/shared/seeds")
NOTES = SEEDS / "000_59502f156baec242.txt"  # SPARK.md, the operator notes the pack was made from
RECORD = SEEDS / "004_af61b7e57142d640.txt"  # the registry's LocalMaxxing record of the same model instance
PACK = Path(__file__).parents[3] / "src" / "servepack" / "packs" / "data" / "laguna-s-2.1-dgx-spark.toml"


@pytest.mark.skipif(not NOTES.is_file() or not RECORD.is_file(), reason="the seeds are not on this machine")
def test_pack_pins_the_bytes_of_its_own_revision_and_says_why_the_record_differs() -> None:
    pack = load_pack("laguna-s-2.1-dgx-spark").pack
    notes = NOTES.read_text()
    # the pack's pin is the operator notes' pin: that revision's file, and the bytes its numbers were measured on
    assert pack.model.source.revision == "fc4e481289523cf7d0df668da6d1d391616141ca"  # type: ignore[union-attr]
    assert "--revision fc4e481289523cf7d0df668da6d1d391616141ca" in notes
    assert f"# expect {pack.model.sha256}" in notes
    assert "weight Q4_K_M @ `a8b55c75…`" in notes
    # the record served a later upload of the same repository: other revision, other bytes
    facts = record_facts(load_record(RECORD))
    assert facts.model_instance_id == pack.model.model_instance_id
    assert facts.model_sha256 == "7da520c5f44bc3c79d4eeebfd1151ba7114c5d7568e72a995638417093c5753f"
    assert facts.model_sha256 != pack.model.sha256
    assert re.search(r"revision e08e1fe855bb2d43f96ad78e24495283f3426c67, artifact SHA-256 7da520c5",
                     load_record(RECORD).notes["localmaxxing"])
    # and the pack says so, naming both revisions
    text = PACK.read_text()
    assert "fc4e481289523cf7d0df668da6d1d391616141ca" in text and "e08e1fe855bb2d43f96ad78e24495283f3426c67" in text
    assert "7da520c5" in text and "DIFFERS" in text
