"""Saga ids: the UTC second of the kit's clock (sortable), then 64 random bits."""

from __future__ import annotations

import re

from agent_saga._clock import FakeClock, RandomIds

ID = re.compile(r"(\d{8}T\d{6})-([0-9a-f]{16})")


def stamp(saga_id: str) -> str:
    match = ID.fullmatch(saga_id)
    assert match is not None, saga_id
    return match.group(1)


def test_ids_carry_the_current_second_of_the_clock() -> None:
    clock = FakeClock(1_800_000_000.25)  # 2027-01-15 08:00:00.25 UTC
    ids = RandomIds(clock)
    first = ids.new_id()
    clock.advance(0.7)  # 08:00:00.95: the same second
    second = ids.new_id()
    assert stamp(first) == stamp(second) == "20270115T080000"
    assert first != second
    clock.advance(0.1)  # 08:00:01.05
    assert stamp(ids.new_id()) == "20270115T080001"
    clock.advance(86_400)  # a day later, same time of day
    assert stamp(ids.new_id()) == "20270116T080001"


def test_ids_sort_by_time() -> None:
    clock = FakeClock(1_800_000_000.0)
    ids = RandomIds(clock)
    made = []
    for _ in range(5):
        made.append(ids.new_id())
        clock.advance(1.5)
    assert sorted(made) == made
    assert len(set(made)) == len(made)
