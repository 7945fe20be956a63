"""docs/guarantees.md and the stores' computed crash models say the same thing."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_saga import AgentKit, FileLogStore, LogStore, MemoryLogStore
from agent_saga._log.sink import MemorySink, SinkLogStore, SqliteSink

DOC = Path(__file__).resolve().parents[1] / "docs" / "guarantees.md"


def crash_models(tmp_path: Path) -> dict[str, dict[str, str]]:
    stores: dict[str, LogStore] = {
        "file": FileLogStore(tmp_path / "file"),
        "memory": MemoryLogStore(),
        "sqlite sink": SinkLogStore(SqliteSink(tmp_path / "s.sqlite")),
        "memory sink": SinkLogStore(MemorySink()),
    }
    try:
        models = {name: store.describe()["crash_model"] for name, store in stores.items()}
        return {name: dict(model) for name, model in models.items() if isinstance(model, dict)}
    finally:
        for store in stores.values():
            store.close()


@pytest.mark.parametrize("event", ["process_crash", "power_loss", "disk_loss"])
def test_every_crash_model_sentence_is_in_the_doc(tmp_path: Path, event: str) -> None:
    text = DOC.read_text()
    for name, model in crash_models(tmp_path).items():
        assert model[event] in text, f"{name} / {event} is not stated in docs/guarantees.md"


def test_manifest_carries_the_crash_model(tmp_path: Path) -> None:
    with AgentKit(home=tmp_path / "home") as kit:
        store = kit.guarantees()["store"]
    assert set(store["crash_model"]) == {"process_crash", "power_loss", "disk_loss"}
    assert any("powersafe overwrite" in a for a in store["assumes"])


def test_postgres_crash_model_sentences_are_in_the_doc() -> None:
    from agent_saga._postgres.sql import DISK_LOSS, POWER_LOSS, PROCESS_CRASH

    text = DOC.read_text()
    for sentence in (PROCESS_CRASH, *POWER_LOSS.values(), *DISK_LOSS.values()):
        assert sentence in text


def test_what_the_commands_verify_is_stated_in_the_doc_and_the_manifest(tmp_path: Path) -> None:
    """Each durable store's verification sentence is in the doc, and a kit on the file store
    states its own in ``guaranteed_after``."""
    from agent_saga._kit.manifest import BEYOND_CHECKPOINT, VERIFIED

    text = " ".join(DOC.read_text().split())
    for sentence in (*VERIFIED.values(), BEYOND_CHECKPOINT):
        assert sentence in text, f"not stated in docs/guarantees.md: {sentence}"
    with AgentKit(home=tmp_path / "home") as kit:
        manifest = kit.guarantees()
    assert VERIFIED["file"] in manifest["guaranteed_after"]
    assert BEYOND_CHECKPOINT in manifest["not_claimed"]


def test_what_speculation_and_merging_do_not_claim_is_in_the_doc_and_the_manifest(
    tmp_path: Path,
) -> None:
    from agent_saga._kit.mesh import MESH_AFTER, MESH_NOT_CLAIMED
    from agent_saga._kit.speculation import (
        MEMORY_LEASES,
        SPECULATION_BEFORE,
        SPECULATION_NOT_CLAIMED,
    )

    text = " ".join(DOC.read_text().split())
    for sentence in (*SPECULATION_NOT_CLAIMED, MEMORY_LEASES, *MESH_NOT_CLAIMED):
        assert sentence in text, f"not stated in docs/guarantees.md: {sentence}"
    with AgentKit(home=tmp_path / "home") as kit:
        manifest = kit.guarantees()
    assert SPECULATION_BEFORE in manifest["enforced_before_effect"]
    assert MESH_AFTER in manifest["guaranteed_after"]
    for sentence in (*SPECULATION_NOT_CLAIMED, *MESH_NOT_CLAIMED):
        assert sentence in manifest["not_claimed"]
    assert MEMORY_LEASES not in manifest["not_claimed"]
    with AgentKit(store="memory") as memory:
        assert MEMORY_LEASES in memory.guarantees()["not_claimed"]


def test_what_redactions_and_approvals_rest_on_is_stated_in_the_doc_and_the_manifest(
    tmp_path: Path,
) -> None:
    """The sentences on redactions after the fact and on what a vote rests on are in the doc,
    and a kit states them (the approvals' one for its own set-up)."""
    from agent_saga import Approvals
    from agent_saga._approvals.wait import SIGNED_LIMIT, UNSIGNED_LIMIT
    from agent_saga._kit.manifest import REDACTION_CHECKED, REDACTION_LIMIT

    text = " ".join(DOC.read_text().split())
    for sentence in (REDACTION_CHECKED, REDACTION_LIMIT, UNSIGNED_LIMIT, SIGNED_LIMIT):
        assert sentence in text, f"not stated in docs/guarantees.md: {sentence}"
    for signed, limit in ((False, UNSIGNED_LIMIT), (True, SIGNED_LIMIT)):
        approvals = Approvals(approvers=["alice"], require_signature=signed)
        with AgentKit(home=tmp_path / "home", approvals=approvals) as kit:
            manifest = kit.guarantees()
        assert REDACTION_CHECKED in manifest["guaranteed_after"]
        assert REDACTION_LIMIT in manifest["not_claimed"]
        assert limit in manifest["not_claimed"]
