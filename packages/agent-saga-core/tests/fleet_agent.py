"""One agent process of the fleet simulation (``fleet_sim``): sagas until it sees the halt.

``fleet_agent.py URL SCHEMA LEDGER SEED THREADS CAP RECOVERS OWNER_TTL``: one kit on the fleet's
PostgreSQL schema (log store, kill switch beside it, one fleet-wide budget of CAP), THREADS
threads of sagas (two budgeted charges, one saga in three failing after them) and, with
RECOVERS = 1, a thread of recovery passes. It prints ``ready`` once its kit is open, ``ack SAGA
STATUS`` only after a transaction returned, ``recovered SAGA`` for each saga a pass settled,
``halted T`` (``time.monotonic()``) when it first knew of the halt (its kill switch, read every
10 ms as a step's gate reads it, said halted, or refused a step), ``refused T`` when the switch
first refused one of its steps or transactions, ``abandoned`` when
it stops with a recovery pass in flight (what the pass left is then another worker's, as after
a crash), and ``error ...`` before exiting with :data:`FAILED` when a thread failed. Effects
are files in LEDGER: a charge or refund is a file created once per idempotency key, and every
refund call is also a line ``KEY T`` in ``refunds-PID``. SIGUSR1 dumps the threads' stacks on
stderr.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

BUDGET = "fleet"
LEASE_TTL = 2.0
RECOVERY_EVERY = 1.0
"""Seconds between the recovery passes of an agent that runs them."""
FAILED = 3
"""An agent's exit status when a thread of it failed (it printed the error first)."""


def _say(line: str) -> None:
    os.write(1, f"{line}\n".encode())


def agent_main(argv: list[str]) -> None:  # pragma: no cover - runs in the agent processes
    """One agent: sagas on ``THREADS`` threads (and recovery passes) until it sees the halt."""
    from agent_saga import (
        AgentKit,
        Budget,
        CompensatorRegistry,
        GateRefused,
        HaltedError,
        PostgresBudgetStore,
        SagaRolledBack,
    )
    from agent_saga._gate.killswitch_pg import PostgresKillSwitch
    from agent_saga._postgres.store import PostgresLogStore

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the parent asks a straggler
    url, schema, ledger_dir, seed, threads, cap, recovers, ttl = argv
    ledger = Path(ledger_dir)
    store = PostgresLogStore(url, schema=schema, owner_ttl=float(ttl))
    budget = Budget(BUDGET, Decimal(cap), store=PostgresBudgetStore(url, schema=schema))
    kit = AgentKit(
        home=ledger / f"home-{os.getpid()}",
        store=store,
        kill_switch=PostgresKillSwitch.beside(store, watch=True),
        rules=[budget],
        registry=CompensatorRegistry(),
    )
    calls = os.open(ledger / f"refunds-{os.getpid()}", os.O_CREAT | os.O_APPEND | os.O_WRONLY)

    def once(action: str, key: str, amount: str = "") -> None:
        """The effect's file appears whole or not at all (a SIGKILL between creating it and
        writing the amount left an empty charge file): written aside, then linked in place,
        which fails if the effect already happened."""
        aside = ledger / f".{action}-{os.getpid()}-{threading.get_ident()}"
        aside.write_text(amount)
        with contextlib.suppress(FileExistsError):
            os.link(aside, ledger / f"{action}@{key}")
        aside.unlink()

    @kit.compensator("fleet.refund")
    def refund(idempotency_key: str) -> None:
        key = idempotency_key.removesuffix("/compensate")
        os.write(calls, f"{key} {time.monotonic()}\n".encode())
        once("refund", key)

    def charged(idempotency_key: str, amount: int) -> bool:
        return (ledger / f"charge@{idempotency_key}").exists()

    @kit.tool(name="fleet.charge", compensate="fleet.refund", probe=charged)
    def charge(amount: int, idempotency_key: str = "") -> dict[str, str]:
        once("charge", idempotency_key, str(amount))
        return {"charge": idempotency_key}

    halted = threading.Event()
    first_refusal = threading.Lock()
    refusals: list[float] = []

    def saw_halt() -> None:
        if not halted.is_set():
            halted.set()
            _say(f"halted {time.monotonic()}")

    def refused() -> None:
        at = time.monotonic()
        with first_refusal:
            if not refusals:
                refusals.append(at)
                _say(f"refused {at}")
        saw_halt()

    def watch_switch() -> None:
        """What any step's gate would read now, every 10 ms: the moment this agent knows."""
        while not halted.is_set():
            if kit.runtime.kill_switch.state().halted:
                saw_halt()
                return
            time.sleep(0.01)

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # fenced (owner expired under load) or a bug
                if halted.is_set() and work is recovery:
                    return  # a pass cut short by the closing kit, as if the agent had died
                _say(f"error {type(exc).__name__}: {' '.join(str(exc).split())}")
                os._exit(FAILED)

        return run

    def sagas_from(rng: random.Random) -> Callable[[], None]:
        return guarded(lambda: sagas(rng))

    def sagas(rng: random.Random) -> None:
        while not halted.is_set():
            fail = rng.random() < 1 / 3
            try:
                with kit.transaction("pay") as saga:
                    try:
                        charge(rng.randint(1, 5))
                        charge(rng.randint(1, 5))
                    except HaltedError:
                        refused()  # the kill switch refused this step: now, not after
                        raise  # the rollback that follows
                    except GateRefused as exc:
                        raise RuntimeError("over budget") from exc
                    if fail:
                        raise RuntimeError("agent gave up")
                _say(f"ack {saga.id} committed")
            except SagaRolledBack as exc:
                if not exc.report.log_errors:
                    _say(f"ack {exc.saga_id} {exc.report.status.value}")
            except HaltedError:
                refused()

    in_pass = threading.Event()

    def recovery() -> None:
        while not halted.wait(RECOVERY_EVERY):
            in_pass.set()
            for saga in kit.recover(lease_ttl=LEASE_TTL).recovered:
                _say(f"recovered {saga.saga_id}")
            in_pass.clear()

    rng = random.Random(int(seed))
    workers = [
        threading.Thread(target=sagas_from(random.Random(rng.random())))
        for _ in range(int(threads))
    ]
    _say("ready")
    if recovers == "1":  # not waited for: a pass in flight at the halt is abandoned (its lease
        # lapses), as a crash would leave it
        threading.Thread(target=guarded(recovery), daemon=True).start()
    threading.Thread(target=watch_switch, daemon=True).start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if in_pass.is_set():
        _say("abandoned")  # what the pass left is another worker's to finish, as after a crash
    kit.close()
    os._exit(0)  # the recovery thread, if any, ends with the process


if __name__ == "__main__":  # pragma: no cover
    agent_main(sys.argv[1:])
