"""Saga ids: RFC 9562 version 7 UUIDs on the kit's clock, strictly increasing per source."""

from __future__ import annotations

import os
import threading
import uuid

from agent_saga._clock import FakeClock, RandomIds


def millisecond(saga_id: str) -> int:
    parsed = uuid.UUID(saga_id)
    assert str(parsed) == saga_id  # canonical: lowercase, dashes at 8-4-4-4-12
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122
    return parsed.int >> 80


def test_ids_are_version_7_uuids_on_the_clock_millisecond() -> None:
    clock = FakeClock(1_800_000_000.2504)  # 2027-01-15 08:00:00.2504 UTC
    ids = RandomIds(clock)
    first = ids.new_id()
    assert millisecond(first) == 1_800_000_000_250
    clock.advance(0.5)
    assert millisecond(ids.new_id()) == 1_800_000_000_750
    clock.advance(86_400)
    assert millisecond(ids.new_id()) == 1_800_086_400_750
    # 74 random bits: another source on the same clock makes another id.
    assert RandomIds(clock).new_id()[15:] != RandomIds(clock).new_id()[15:]


def test_ids_sort_by_time_and_increase_within_a_millisecond() -> None:
    clock = FakeClock(1_800_000_000.0)
    ids = RandomIds(clock)
    made: list[str] = []
    for _ in range(5):
        made.extend(ids.new_id() for _ in range(200))  # one millisecond, 200 ids
        clock.advance(0.0015)
    assert sorted(made) == made
    assert len(set(made)) == len(made)
    assert {millisecond(i) for i in made[:200]} == {1_800_000_000_000}


def test_ids_keep_increasing_when_the_clock_steps_back() -> None:
    clock = FakeClock(1_800_000_000.0)
    ids = RandomIds(clock)
    before = ids.new_id()
    clock.advance(-5.0)  # NTP stepped the clock back
    after = [ids.new_id() for _ in range(3)]
    assert [before, *after] == sorted({before, *after})
    assert millisecond(after[-1]) == 1_800_000_000_000  # the last millisecond seen is kept


def test_a_full_random_field_moves_on_to_the_next_millisecond() -> None:
    clock = FakeClock(1_800_000_000.0)
    ids = RandomIds(clock)
    first = ids.new_id()
    ids._last = (ids._last[0], (1 << 74) - 1)  # the field cannot grow within this millisecond
    second = ids.new_id()
    assert first < second
    assert millisecond(second) == millisecond(first) + 1


def test_ids_from_several_threads_are_unique_and_increasing_per_thread() -> None:
    ids = RandomIds()
    made: list[list[str]] = [[] for _ in range(4)]

    def make(out: list[str]) -> None:
        out.extend(ids.new_id() for _ in range(2_000))

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for out in made:
        assert out == sorted(out)
    assert len({i for out in made for i in out}) == 8_000


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    # The random fields come from a pool drawn in bulk: a child forked with the pool half
    # full must not hand out the ids its parent hands out next.
    clock = FakeClock(1_800_000_000.0)
    parent_ids, child_ids = RandomIds(clock), RandomIds(clock)
    parent_ids.new_id()  # the pool is now filled, and 63 draws remain in it
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, sent to the parent
        try:
            os.write(write_end, ",".join(child_ids.new_id() for _ in range(3)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        from_child = pipe.read().decode().split(",")
    assert os.waitpid(pid, 0)[1] == 0
    from_parent = [child_ids.new_id() for _ in range(3)]  # same source state as the child's
    assert len(from_child) == 3
    assert {i[15:] for i in from_child}.isdisjoint(i[15:] for i in from_parent)
