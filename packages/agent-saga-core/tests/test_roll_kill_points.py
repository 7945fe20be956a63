"""SIGKILL at each point of a roll and of what follows it: before and after the seal, inside
and after the saga index's update, after a checkpoint is published and after its frontier is
kept. A process runs sagas on a home that rolls every 5 records, catching the index up and
publishing a checkpoint after each saga, and kills itself (SIGKILL) the third time it reaches
its point. Afterwards nothing acknowledged is lost, the chain verifies across segments, the
index answers as the log does, recovery finishes the saga left open and a new checkpoint
extends the old one.

The processes of all points run at once (the test takes a few seconds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agent_saga import AgentKit, FileLogStore, read_log, verify_file
from agent_saga._history.build import sagas
from agent_saga._history.sagareads import own_records, unfinished_sagas

POINTS = {
    "before the seal": ("agent_saga._log.writer", "", "write_summary", "before"),
    "after the seal": ("agent_saga._log.writer", "", "write_summary", "after"),
    "after the next segment opened": (
        "agent_saga._log.writer",
        "SegmentWriter",
        "_switch",
        "after",
    ),
    "inside the index update": ("agent_saga._log.sagaindex", "", "save_point", "after"),
    "after the index update": ("agent_saga._log.sagaindex", "SagaIndex", "refresh", "after"),
    "after a checkpoint": (
        "agent_saga.proofs._checkpoints",
        "CheckpointLog",
        "publish_head",
        "after",
    ),
    "after its frontier": ("agent_saga.proofs._frontierfile", "", "save_frontier", "after"),
}
"""Where the process kills itself: (module, class or "", function, before or after it)."""

CHILD = """
import importlib, os, signal, sys
from agent_saga import AgentKit, FileLogStore
home, module, cls, name, when = sys.argv[1:6]
owner = importlib.import_module(module)
target = getattr(owner, cls) if cls else owner
original = getattr(target, name)
seen = [0]
def kill_at(*args, **kwargs):
    seen[0] += 1
    if when == "before" and seen[0] == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    result = original(*args, **kwargs)
    if when == "after" and seen[0] == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return result
setattr(target, name, kill_at)
kit = AgentKit(home=home, store=FileLogStore(home, segment_records=5), checkpoint_every=10**6)
kit.compensator("undo_after_roll", lambda x: None)
@kit.tool(compensate="undo_after_roll")
def act(x: int) -> int:
    return x
for n in range(40):
    with kit.transaction(f"s{n}") as saga:
        act(n)
    print(saga.id, flush=True)
    kit.store.saga_index.refresh()
    kit.checkpoint()
print("never killed", flush=True)
"""


def test_sigkill_at_every_point_of_a_roll_the_index_and_the_checkpoint(tmp_path: Path) -> None:
    children = {}
    for label, point in POINTS.items():
        home = tmp_path / label.replace(" ", "-")
        children[label] = (
            home,
            subprocess.Popen(
                [sys.executable, "-c", CHILD, str(home), *point],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
    try:
        for label, (home, proc) in children.items():
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == -9, f"{label}: not killed ({proc.returncode}): {err[-500:]}"
            check_after_the_kill(label, home, out.split())
    finally:
        for _, proc in children.values():
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


def check_after_the_kill(label: str, home: Path, acked: list[str]) -> None:
    assert acked, f"{label}: no saga acknowledged before the kill"
    kit = AgentKit(home=home, store=FileLogStore(home, segment_records=5))
    kit.compensator("undo_after_roll", lambda x: None)
    try:
        records = list(read_log(home))
        ended = {v.id: v.status.value for v in sagas(records)}
        assert all(ended.get(sid) == "committed" for sid in acked), f"{label}: lost {acked}"
        store = kit.store
        for sid in [*acked, *ended]:
            want = [r.seq for r in records if r.saga == sid]
            assert [r.seq for r in own_records(store, sid)] == want, f"{label}: {sid}"
        want_open = [v.id for v in sagas(records) if v.ended is None]
        assert [v.id for v in unfinished_sagas(store)] == want_open, label
        kit.recover()
        assert [v.id for v in unfinished_sagas(store)] == [], label
        published = kit.checkpoint()  # extends the checkpoint published before the kill
        assert published.size == len(list(read_log(home))), label
    finally:
        kit.close()
    assert verify_file(home / "log.jsonl").ok, label
    assert len(list((home / "segments").glob("*.sealed"))) >= 1, label
