"""A fleet on one PostgreSQL schema: sagas per second for the whole fleet, with kills and a halt.

Runs ``packages/agent-saga-core/tests/fleet_sim.py``'s fleet: AGENTS agent processes, each with
THREADS threads of sagas (two budgeted charges, one saga in three rolled back) on one kit,
one agent in four also running recovery passes; every KILL_EVERY seconds one agent is SIGKILLed
and replaced; then the kill switch is halted. After the final recovery it prints the fleet's
acknowledged sagas per second and the checks (each should read 0 or ok), for ``--runs`` runs.

The server is AGENT_SAGA_TEST_PG_URL, or a throwaway cluster started from local binaries.

Usage: uv run python bench/fleet_pg.py [--agents 16] [--threads 4] [--seconds 30]
       [--kill-every 3.0] [--runs 1] [--url URL]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from agent_saga.testing.postgres import postgres_server, scratch_schema

TESTS = Path(__file__).resolve().parents[1] / "packages/agent-saga-core/tests"

OWNER_TTL = 2.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--threads", type=int, default=4, help="saga threads per agent")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--kill-every", type=float, default=3.0)
    parser.add_argument("--cap", type=int, default=2000, help="the fleet budget's cap")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--url", default=os.environ.get("AGENT_SAGA_TEST_PG_URL"))
    args = parser.parse_args()
    sys.path.insert(0, str(TESTS))
    fleet_sim = importlib.import_module("fleet_sim")  # the simulation the test runs, bigger
    run_fleet, check_fleet = fleet_sim.run_fleet, fleet_sim.check_fleet
    with ExitStack() as stack:
        url = args.url or stack.enter_context(postgres_server())
        for n in range(args.runs):
            with scratch_schema(url) as schema, tempfile.TemporaryDirectory() as ledger:
                run = run_fleet(
                    url,
                    schema,
                    Path(ledger),
                    agents=args.agents,
                    seconds=args.seconds,
                    threads=args.threads,
                    kill_every=args.kill_every,
                    cap=args.cap,
                    owner_ttl=OWNER_TTL,
                    seed=20261201 + n,
                )
                found = check_fleet(url, schema, Path(ledger), run, OWNER_TTL)
            delays = sorted(run.halt_delays)
            print(
                f"run {n + 1}: {args.agents} agents x {args.threads} threads, {run.seconds:.1f} s:"
                f" {len(run.acked)} sagas acknowledged, {run.sagas_per_second:.1f} sagas/s;"
                f" {len(run.killed)} SIGKILLed, {len(run.failed)} fenced"
            )
            print(
                f"  halt seen by {len(delays)} agents, slowest {delays[-1] if delays else 0:.3f} s,"
                f" not seen {run.not_halted}; first refusal in {len(run.refusal_delays)},"
                f" slowest {max(run.refusal_delays, default=0):.3f} s;"
                f" {len(run.stragglers)} stuck after it,"
                f" {run.never_started} still starting;"
                f" budget peak {run.peak_usage} of cap {args.cap}"
            )
            print(
                f"  verified {found.verified}; lost {len(found.lost)}; unsettled {found.unsettled};"
                f" needs human {found.needs_human}; double refunds {len(found.double_refunds)};"
                f" recovered twice {len(found.recovered_twice)}; refunds wrong"
                f" {found.refunded_not_charged + found.committed_refunded + found.unrefunded};"
                f" spent {found.usage[0]} = committed {found.committed_amount}"
            )


if __name__ == "__main__":
    main()
