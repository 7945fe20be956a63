"""A fleet of 16 agent processes on one PostgreSQL schema, some SIGKILLed, recovered by others.

The fleet (see ``fleet_sim``) runs concurrent sagas against one fleet-wide budget whose cap is
small enough to be reached, so reservations contend at the cap throughout; agents are killed
and replaced while one in four runs recovery passes; then the kill switch is halted. Checked:
no acknowledged outcome is lost, no refund runs twice in processes that lived, every charge of
a saga that did not commit is refunded and none of a committed one, no saga is recovered by two
workers, the budget never goes over its cap (watched while the fleet runs, and settled to the
committed charges at the end: what stays held belongs to sagas killed before their first
record), and every live agent sees the halt within 1 s of its commit (its kill switch, as a
step's gate reads it, says halted). Recovery leases are 2 s, shorter than a pass may take
under load: the workers renew them while they work.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from fleet_sim import check_fleet, run_fleet

AGENTS = 16
CAP = 400
OWNER_TTL = 2.0


def test_fleet_of_16_agents_with_kills_recovery_and_a_halt(
    pg_url: str, schema: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    run = run_fleet(
        pg_url,
        schema,
        ledger,
        agents=AGENTS,
        seconds=8.0,
        threads=2,
        kill_every=1.0,
        cap=CAP,
        owner_ttl=OWNER_TTL,
    )
    assert len(run.killed) >= 6
    assert all("expired" in error for error in run.failed.values()), run.failed
    assert run.not_halted == 0
    assert run.stragglers == []  # every agent ended by itself after the halt
    assert run.halt_delays
    assert max(run.halt_delays) <= 1.0, (run.halt_delays, run.refusal_delays)
    assert run.peak_usage <= CAP
    found = check_fleet(pg_url, schema, ledger, run, OWNER_TTL)
    assert found.verified
    assert found.needs_human == 0
    assert len(run.acked) >= 50
    assert found.lost == []
    assert found.unsettled == 0
    assert found.double_refunds == []
    assert found.recovered_twice == []
    assert (found.refunded_not_charged, found.committed_refunded, found.unrefunded) == (0, 0, 0)
    spent, held = found.usage
    assert found.holds_of_known_sagas == 0
    assert spent == found.committed_amount
    assert spent + held <= Decimal(CAP)
