"""A fleet on one PostgreSQL schema: agent processes, SIGKILLs, recovery workers, a halt.

Used by ``test_fleet_pg.py`` (small) and ``bench/fleet_pg.py`` (bigger). :func:`run_fleet`
keeps ``agents`` processes running for ``seconds``; each runs ``threads`` threads of sagas (two
charges against one fleet-wide budget, one saga in three failing after them) on one kit: one
:class:`PostgresLogStore`, so its threads share batches. One agent in four also runs recovery
passes. Every ``kill_every`` seconds the parent SIGKILLs a random agent and starts a new one.
Then it halts the fleet's kill switch and every agent reports when it saw the halt.

The witnesses live outside the agents: effects are files in ``ledger`` (a charge or refund is a
file created once per idempotency key; every refund call is also a line in its process's own
file), acknowledgements are lines an agent prints only after a transaction returned, and a
thread of the parent reads the budget's usage while the fleet runs. :func:`check_fleet` then
recovers what is left and returns what was seen; the caller asserts.

The agents are ``fleet_agent.py`` processes.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from fleet_agent import BUDGET, LEASE_TTL

AGENT = Path(__file__).with_name("fleet_agent.py")


@dataclass
class Agent:
    """A running agent process and what it printed so far."""

    proc: subprocess.Popen[bytes]
    buffer: bytes = b""
    lines: list[str] = field(default_factory=list)
    ready: bool = False
    ready_before_halt: bool = False
    saw_halt: bool = False

    def read(self) -> None:
        """Take what the agent printed (non-blocking; call when its pipe is readable)."""
        assert self.proc.stdout is not None
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        self.buffer += chunk
        *done, self.buffer = self.buffer.split(b"\n")
        self.lines.extend(line.decode() for line in done)
        if not chunk:
            self.proc.stdout.close()


@dataclass
class FleetRun:
    """What a fleet run saw; :func:`check_fleet` adds the checks' findings."""

    acked: dict[str, str] = field(default_factory=dict)
    recovered_by: dict[str, list[int]] = field(default_factory=dict)
    killed: dict[int, float] = field(default_factory=dict)
    """Agents that died (SIGKILLed, or stopped with a recovery pass in flight), with when
    (``time.monotonic()``)."""
    failed: dict[int, str] = field(default_factory=dict)
    halt_delays: list[float] = field(default_factory=list)
    """Per agent at work at the halt: seconds from the halt's commit to when it knew."""
    refusal_delays: list[float] = field(default_factory=list)
    """Per agent refused after the halt: seconds from the halt's commit to its first refusal
    (an agent that knew of the halt between two sagas may never be refused)."""
    not_halted: int = 0
    peak_usage: Decimal = Decimal(0)
    seconds: float = 0.0
    agents_started: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    stragglers: list[str] = field(default_factory=list)
    """Agents at work before the halt and still running 30 s after it (then killed)."""
    never_started: int = 0
    """Agents started so late that they were not at work at the halt, still running 30 s after
    it (then killed)."""

    @property
    def sagas_per_second(self) -> float:
        return len(self.acked) / self.seconds if self.seconds else 0.0


def start_agent(url: str, schema: str, ledger: Path, seed: int, settings: dict[str, str]) -> Agent:
    argv = [url, schema, str(ledger), str(seed), settings["threads"], settings["cap"]]
    argv += [settings["recovers"], settings["owner_ttl"]]
    proc = subprocess.Popen(
        [sys.executable, str(AGENT), *argv], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    return Agent(proc)


def _pump(agents: list[Agent], timeout: float) -> None:
    """Read whatever the agents printed within ``timeout`` seconds."""
    open_pipes = {
        a.proc.stdout.fileno(): a for a in agents if a.proc.stdout and not a.proc.stdout.closed
    }
    if not open_pipes:
        time.sleep(timeout)
        return
    ready, _, _ = select.select(list(open_pipes), [], [], timeout)
    for fd in ready:
        open_pipes[fd].read()


def _take(run: FleetRun, agent: Agent, halted_at: float | None) -> None:
    """Fold an agent's printed lines into ``run``."""
    pid = agent.proc.pid
    for line in agent.lines:
        word, _, rest = line.partition(" ")
        if word == "ready":
            agent.ready = True
        elif word == "ack":
            saga, status = rest.split()
            run.acked[saga] = status
        elif word == "recovered":
            run.recovered_by.setdefault(rest, []).append(pid)
        elif word == "halted" and halted_at is not None and agent.ready_before_halt:
            agent.saw_halt = True
            run.halt_delays.append(float(rest) - halted_at)
        elif word == "refused" and halted_at is not None and agent.ready_before_halt:
            run.refusal_delays.append(float(rest) - halted_at)
        elif word == "error":
            run.failed[pid] = rest
        elif word == "abandoned":
            run.killed[pid] = time.monotonic()
    agent.lines.clear()


def run_fleet(
    url: str,
    schema: str,
    ledger: Path,
    *,
    agents: int,
    seconds: float,
    threads: int,
    kill_every: float,
    cap: int,
    owner_ttl: float = 2.0,
    seed: int = 20261201,
) -> FleetRun:
    """Run the fleet (see the module docstring); returns what was seen, before the checks."""
    from agent_saga import PostgresBudgetStore
    from agent_saga._gate.killswitch_pg import PostgresKillSwitch

    rng = random.Random(seed)
    run = FleetRun()
    budget = PostgresBudgetStore(url, schema=schema)
    stop_watch = threading.Event()

    def watch_budget() -> None:
        while not stop_watch.wait(0.02):
            with contextlib.suppress(Exception):  # the tables appear with the first agent
                spent, held = budget.usage(BUDGET, "all")
                run.peak_usage = max(run.peak_usage, spent + held)

    settings = {"threads": str(threads), "cap": str(cap), "owner_ttl": str(owner_ttl)}

    def start(n: int) -> Agent:
        run.agents_started += 1
        recovers = {"recovers": "1" if n % 4 == 0 else "0"}
        return start_agent(url, schema, ledger, rng.randrange(2**32), settings | recovers)

    watcher = threading.Thread(target=watch_budget)
    watcher.start()
    started = time.monotonic()
    fleet = [start(n) for n in range(agents)]
    try:
        deadline = time.monotonic() + 120
        while not all(agent.ready for agent in fleet):
            assert time.monotonic() < deadline, "the agents did not start within 120 s"
            assert all(agent.proc.poll() is None for agent in fleet), "an agent failed to start"
            _pump(fleet, 0.05)
            for agent in fleet:
                _take(run, agent, None)
        began = time.monotonic()
        run.phases["start"] = began - started
        next_kill = began + kill_every
        while time.monotonic() < began + seconds:
            _pump(fleet, 0.05)
            if time.monotonic() >= next_kill:
                next_kill += kill_every
                n = rng.randrange(agents)
                victim = fleet[n]
                run.killed[victim.proc.pid] = time.monotonic()
                victim.proc.send_signal(signal.SIGKILL)
                victim.proc.wait()
                while victim.proc.stdout and not victim.proc.stdout.closed:
                    victim.read()
                _take(run, victim, None)
                fleet[n] = start(n)
            for agent in fleet:
                _take(run, agent, None)
        run.seconds = time.monotonic() - began
        for agent in fleet:
            agent.ready_before_halt = agent.ready and agent.proc.poll() is None
        with PostgresKillSwitch(url, schema=schema, watch=False) as switch:
            switch.state()  # connected: the delays below start at the halt's commit
            halted_at = time.monotonic()
            switch.halt("fleet simulation over", at=time.time())
        deadline = time.monotonic() + 30
        while any(a.proc.poll() is None for a in fleet) and time.monotonic() < deadline:
            _pump(fleet, 0.05)
            for agent in fleet:
                _take(run, agent, halted_at)
        for agent in fleet:
            if agent.proc.poll() is None:
                if agent.ready_before_halt:
                    run.stragglers.append(f"{agent.proc.pid} saw the halt: {agent.saw_halt}")
                    with contextlib.suppress(ProcessLookupError):
                        agent.proc.send_signal(signal.SIGUSR1)  # its threads' stacks, on stderr
                        time.sleep(0.5)
                else:
                    run.never_started += 1
                run.killed[agent.proc.pid] = time.monotonic()
                agent.proc.kill()
            agent.proc.wait()
            while agent.proc.stdout and not agent.proc.stdout.closed:
                agent.read()
            _take(run, agent, halted_at)
        run.not_halted = sum(
            agent.ready_before_halt and not agent.saw_halt and agent.proc.pid not in run.failed
            for agent in fleet
        )
        run.phases["halt"] = time.monotonic() - halted_at
    finally:
        for agent in fleet:
            if agent.proc.poll() is None:
                agent.proc.kill()
                agent.proc.wait()
        stop_watch.set()
        watcher.join()
        budget.close()
    return run


@dataclass
class FleetCheck:
    """What the final recovery and the witnesses show after a run."""

    verified: bool
    needs_human: int
    lost: list[str]
    unsettled: int
    double_refunds: list[str]
    refunded_not_charged: int
    committed_refunded: int
    unrefunded: int
    recovered_twice: list[str]
    usage: tuple[Decimal, Decimal]
    committed_amount: Decimal
    holds_of_known_sagas: int
    """Reservations still held for a saga the log knows (all of them are settled by recovery;
    a process killed after reserving and before its saga's first record leaves one, kept)."""
    sagas: int


def _excused(calls: list[tuple[float, str]], run: FleetRun) -> bool:
    """Whether every refund call but the first of a key came after its predecessor's caller died.

    A compensation runs again only when the process that ran it died before logging it done
    (SIGKILLed earlier, or fenced off); any other repeat is a double compensation.
    """
    for (_, before), (at, _) in itertools.pairwise(calls):
        pid = int(before) if before.isdigit() else -1
        if pid not in run.failed and run.killed.get(pid, at + 1) > at:
            return False
    return True


def check_fleet(url: str, schema: str, ledger: Path, run: FleetRun, owner_ttl: float) -> FleetCheck:
    """Resume the fleet, recover what the dead left, and compare the log with the witnesses."""
    from agent_saga import AgentKit, Budget, CompensatorRegistry, PostgresBudgetStore, SagaStatus
    from agent_saga._gate.killswitch_pg import PostgresKillSwitch
    from agent_saga._postgres.store import PostgresLogStore

    with PostgresKillSwitch(url, schema=schema) as switch:
        switch.resume()
    time.sleep(owner_ttl + 0.5)  # the owners of the last killed agents expire
    budget_store = PostgresBudgetStore(url, schema=schema)
    store = PostgresLogStore(url, schema=schema, owner_ttl=owner_ttl)
    kit = AgentKit(
        home=ledger / "checker",
        store=store,
        rules=[Budget(BUDGET, Decimal(10**9), store=budget_store)],
        registry=CompensatorRegistry(),
    )

    @kit.compensator("fleet.refund")
    def refund(idempotency_key: str) -> None:
        key = idempotency_key.removesuffix("/compensate")
        with contextlib.suppress(FileExistsError):
            os.close(os.open(ledger / f"refund@{key}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        with (ledger / "refunds-checker").open("a") as calls:
            calls.write(f"{key} {time.monotonic()}\n")

    def charged(idempotency_key: str, amount: int) -> bool:
        return (ledger / f"charge@{idempotency_key}").exists()

    @kit.tool(name="fleet.charge", compensate="fleet.refund", probe=charged)
    def charge(amount: int, idempotency_key: str) -> None:
        raise AssertionError("the checker charges nothing")

    try:
        report = kit.recover(lease_ttl=LEASE_TTL)
        deadline = time.monotonic() + LEASE_TTL + 5
        while report.claimed_elsewhere and time.monotonic() < deadline:  # a killed worker's
            time.sleep(0.5)  # claims lapse after the lease's ttl
            report = kit.recover(lease_ttl=LEASE_TTL)
        verified = kit.verify().ok
        records = list(kit.store.records())
        usage = budget_store.usage(BUDGET, "all")
        held_for = [hold.saga for hold in budget_store.holds(BUDGET)]
    finally:
        kit.close()
        budget_store.close()
    ends = {r.saga: r.data["status"] for r in records if r.kind == "saga.end" and r.saga}
    begun = {r.saga for r in records if r.kind == "saga.begin"}
    committed = {
        r.data["idempotency_key"]
        for r in records
        if r.kind == "step.intent" and ends.get(r.saga or "") == SagaStatus.COMMITTED.value
    }
    charge_files = list(ledger.glob("charge@*"))
    charges = {p.name.removeprefix("charge@") for p in charge_files}
    refunds = {p.name.removeprefix("refund@") for p in ledger.glob("refund@*")}
    calls: dict[str, list[tuple[float, str]]] = {}
    for log in ledger.glob("refunds-*"):
        caller = log.name.removeprefix("refunds-")
        for line in log.read_text().splitlines():
            key, at = line.split()
            calls.setdefault(key, []).append((float(at), caller))
    amounts = {p.name.removeprefix("charge@"): Decimal(p.read_text()) for p in charge_files}
    return FleetCheck(
        verified=verified,
        needs_human=len(report.needs_human),
        lost=[s for s, status in run.acked.items() if ends.get(s) != status],
        unsettled=len(begun - set(ends)),
        double_refunds=[key for key, seen in calls.items() if not _excused(sorted(seen), run)],
        refunded_not_charged=len(refunds - charges),
        committed_refunded=len(refunds & committed),
        unrefunded=len(charges - committed - refunds),
        recovered_twice=[s for s, pids in run.recovered_by.items() if len(pids) > 1],
        usage=usage,
        committed_amount=sum((amounts[k] for k in committed if k in amounts), Decimal(0)),
        holds_of_known_sagas=sum(saga in begun for saga in held_for),
        sagas=len(begun),
    )
