"""``agent-saga demo``: a scripted agent books a trip, offline, on the durable file store.

The story: the agent reserves a seat (COMPENSABLE), tries to charge an amount over the gate's
cap and is refused with a reason it can act on, corrects itself and is charged once, then the
hotel booking fails; the transaction rolls back, refunding and releasing in reverse order.

The services are in-memory fakes with counters (the witnesses: "charged once, refunded once").
Tools and compensators are declared at module level under stable names in a ``demo.`` namespace
(``demo.payments.charge``, ``demo.payments.refund``, ...), so running the demo twice in one
process registers nothing new, and a process that also declares its own ``payments.refund``
(a README example, the user's code) does not collide with the demo's. The compensators
reach the services of the run in progress through a context variable; outside a run they raise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from .._engine.compensation import compensator
from .._engine.report import SagaRolledBack
from .._engine.tool import tool, tool_spec
from .._errors import GateRefused, HaltedError
from .._gate.decisions import MaxValue
from .._kit.agentkit import AgentKit
from .._log.records import SagaStatus, Semantics
from ._logfile import log_path, verify_log

CHARGE_CAP = 500.0
SAY_STYLE = {"airline": "cyan", "payments": "green", "hotel": "blue", "gate": "magenta"}


class HotelUnavailableError(Exception):
    """The fake hotel has no room: the failure that makes the trip roll back."""


@dataclass
class Airline:
    say: Callable[[str, str], None]
    held: int = 0
    released: int = 0
    _by_key: dict[str, dict[str, str]] = field(default_factory=dict)
    _open: set[str] = field(default_factory=set)

    def reserve(self, flight: str, passenger: str, key: str) -> dict[str, str]:
        if key in self._by_key:  # the same request twice holds one seat
            return self._by_key[key]
        self.held += 1
        hold = {"pnr": f"PNR-{self.held:03d}", "flight": flight, "seat": "14C"}
        self._by_key[key] = hold
        self._open.add(hold["pnr"])
        self.say("airline", f"seat 14C held on {flight} for {passenger} ({hold['pnr']})")
        return hold

    def release(self, hold: dict[str, str]) -> None:
        if hold["pnr"] not in self._open:
            return  # already released
        self._open.discard(hold["pnr"])
        self.released += 1
        self.say("airline", f"seat {hold['seat']} on {hold['flight']} released ({hold['pnr']})")


@dataclass
class Payments:
    say: Callable[[str, str], None]
    charged: int = 0
    refunded: int = 0
    _by_key: dict[str, dict[str, Any]] = field(default_factory=dict)
    _refund_keys: set[str] = field(default_factory=set)

    def charge(self, amount: float, currency: str, card: str, key: str) -> dict[str, Any]:
        if key in self._by_key:  # idempotent: a retried request is not charged again
            return self._by_key[key]
        self.charged += 1
        receipt = {"charge_id": f"ch_{self.charged:04d}", "amount": amount, "currency": currency}
        self._by_key[key] = receipt
        charge_id = receipt["charge_id"]
        self.say(
            "payments",
            f"charged {amount:.2f} {currency} to {card} ({charge_id}, key {key[:12]}...)",
        )
        return receipt

    def refund(self, receipt: dict[str, Any], key: str) -> None:
        if key in self._refund_keys:
            return
        self._refund_keys.add(key)
        self.refunded += 1
        amount, currency = float(receipt["amount"]), receipt["currency"]
        self.say("payments", f"refunded {amount:.2f} {currency} ({receipt['charge_id']})")


@dataclass
class Hotels:
    say: Callable[[str, str], None]
    booked: int = 0
    cancelled: int = 0

    def book(self, hotel: str, nights: int) -> dict[str, Any]:
        self.say("hotel", f"{hotel} is full for those {nights} nights")
        raise HotelUnavailableError(f"no room at {hotel} for {nights} nights")

    def cancel(self, booking: dict[str, Any]) -> None:
        self.cancelled += 1


@dataclass
class TravelWorld:
    airline: Airline
    payments: Payments
    hotels: Hotels


_WORLD: ContextVar[TravelWorld | None] = ContextVar("agent_saga_demo_world", default=None)


def _world() -> TravelWorld:
    world = _WORLD.get()
    if world is None:
        raise RuntimeError("the demo's in-memory services exist only while the demo runs")
    return world


@contextmanager
def _running(world: TravelWorld) -> Iterator[None]:
    token = _WORLD.set(world)
    try:
        yield
    finally:
        _WORLD.reset(token)


# -- the tools and their compensators, under stable names -------------------------------------


@compensator("demo.airline.release")
def release_seat(result: dict[str, str]) -> None:
    _world().airline.release(result)


@compensator("demo.payments.refund")
def refund_charge(result: dict[str, Any], idempotency_key: str) -> None:
    _world().payments.refund(result, idempotency_key)


@compensator("demo.hotel.cancel")
def cancel_hotel(result: dict[str, Any]) -> None:
    _world().hotels.cancel(result)


@tool(
    name="demo.airline.reserve", semantics=Semantics.COMPENSABLE, compensate="demo.airline.release"
)
def reserve_flight(flight: str, passenger: str, idempotency_key: str = "") -> dict[str, str]:
    """Hold a seat; released by ``demo.airline.release``."""
    return _world().airline.reserve(flight, passenger, idempotency_key)


@tool(
    name="demo.payments.charge", semantics=Semantics.COMPENSABLE, compensate="demo.payments.refund"
)
def charge_card(amount: float, currency: str, card: str, idempotency_key: str = "") -> Any:
    """Charge a card once per idempotency key; undone by ``demo.payments.refund``."""
    return _world().payments.charge(amount, currency, card, idempotency_key)


@tool(name="demo.hotel.book", semantics=Semantics.COMPENSABLE, compensate="demo.hotel.cancel")
def book_hotel(hotel: str, nights: int) -> dict[str, Any]:
    """Book a room; cancelled by ``demo.hotel.cancel``."""
    return _world().hotels.book(hotel, nights)


# -- the scripted agent --------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedCall:
    """One call the agent makes, and how it corrects the call if the gate refuses it."""

    tool: Callable[..., Any]
    kwargs: dict[str, Any]
    fix: dict[str, Any] | None = None
    fix_note: str = ""


PLAN = (
    PlannedCall(reserve_flight, {"flight": "AS-101 LIS-AMS", "passenger": "Ada Lovelace"}),
    PlannedCall(
        charge_card,
        {"amount": 31900, "currency": "EUR", "card": "visa-4242"},
        fix={"amount": 319.0},
        fix_note="it sent cents; retries with amount=319.0",
    ),
    PlannedCall(book_hotel, {"hotel": "Canal View", "nights": 2}),
)


def _tool_name(func: Callable[..., Any]) -> str:
    spec = tool_spec(func)
    return spec.name if spec is not None else func.__name__


class _Story:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.calls = 0

    def say(self, who: str, text: str) -> None:
        line = Text(f"     {who:<9} ", style=SAY_STYLE.get(who, "dim"))
        self.console.print(line.append(text, style=""))

    def call(self, planned: PlannedCall, kwargs: dict[str, Any]) -> Any:
        self.calls += 1
        args = ", ".join(f"{key}={value!r}" for key, value in kwargs.items())
        self.console.print(
            Text(f"  {self.calls} agent     ", style="bold").append(
                f"{_tool_name(planned.tool)}({args})", style=""
            )
        )
        return planned.tool(**kwargs)

    def run(self, plan: tuple[PlannedCall, ...]) -> None:
        for planned in plan:
            try:
                self.call(planned, planned.kwargs)
            except HaltedError:
                raise
            except GateRefused as refusal:
                self.say("gate", f"refused by {refusal.rule}: {refusal.reason}")
                if planned.fix is None:
                    raise
                self.say("agent", f"reads the reason: {planned.fix_note}")
                self.call(planned, {**planned.kwargs, **planned.fix})
            except Exception as exc:
                self.say("agent", f"{type(exc).__name__}: rolling back, newest step first")
                raise


def run_demo(
    console: Console,
    home: Path,
    *,
    command_prefix: str = "agent-saga ",
    chain_key: bytes | None = None,
) -> int:
    """Tell the story on the file store in ``home``; returns the exit code (0: as scripted).

    ``chain_key`` is the key of the home's chain when it is keyed.

    What is durable on return: every record of the demo's saga, including its terminal
    ``rolled_back`` record, is fsynced in ``home``'s log (the kit is closed before returning).
    """
    story = _Story(console)
    world = TravelWorld(Airline(story.say), Payments(story.say), Hotels(story.say))
    cap = MaxValue(CHARGE_CAP, path="amount", tools=frozenset({"demo.payments.charge"}))
    saga_id = ""
    outcome: SagaRolledBack | None = None
    kit = AgentKit(home=home, store="file", rules=[cap], chain_key=chain_key)
    with kit, _running(world):
        console.print(Text("agent-saga demo: a scripted agent books a trip", style="bold"))
        console.print(
            Text(f"  home {home} (durable file log); gate: {cap.describe()}", style="dim")
        )
        try:
            with kit.transaction("book-trip") as saga:
                saga_id = saga.id
                console.print(Text(f"saga {saga_id} 'book-trip' begins"))
                story.run(PLAN)
        except HaltedError as exc:
            hint = f"run '{command_prefix}resume' to release it"
            console.print(Text(f"the kill switch is engaged ({exc.reason}); {hint}", style="red"))
            return 1
        except SagaRolledBack as exc:
            outcome = exc
    if outcome is None:
        console.print(Text("the trip committed: the demo did not go as scripted", style="red"))
        return 1
    report = outcome.report
    done = ", ".join(str(ref.ordinal) for ref in report.compensated) or "none"
    console.print(
        Text(f"saga {saga_id} ", style="bold")
        .append_text(Text(report.status.value, style="yellow"))
        .append(f": {type(outcome.cause).__name__}; compensated steps {done}, newest first")
    )
    airline, payments, hotels = world.airline, world.payments, world.hotels
    console.print(
        Text("  witnesses ", style="dim").append(
            f"charged {payments.charged}, refunded {payments.refunded} | "
            f"seats held {airline.held}, released {airline.released} | "
            f"rooms booked {hotels.booked}",
            style="",
        )
    )
    verified = verify_log(home, chain_key)
    console.print(
        Text("  log       ", style="dim").append(
            f"{log_path(home)}: {verified.records} records, "
            + ("chain verifies" if verified.ok else "DOES NOT VERIFY"),
            style="" if verified.ok else "bold red",
        )
    )
    console.print(Text("inspect what happened:", style="bold"))
    for command in ("sagas", f"replay {saga_id}", "verify"):
        console.print(Text(f"  {command_prefix}{command}", style="cyan"))
    as_scripted = report.status is SagaStatus.ROLLED_BACK and verified.ok
    return 0 if as_scripted else 1
