"""The fleet's kill switch as an agent sees it: pushed by the server, read from memory.

A background thread holds the server's event stream (``GET /v1/killswitch/stream``), which
sends the switch's state at once, on every change and every heartbeat (0.2 s by default).
:meth:`ServerKillSwitch.state` is a read of the last state received and of the time it came,
so checking the switch before every effect costs no round trip. It is fail-closed:

* before the first state arrives, or when the last one is older than ``stale_after``
  seconds (server unreachable, stream stuck, token revoked), the switch reads as halted and
  unreadable;
* a read that finds the state stale first waits up to ``grace`` seconds (half of
  ``stale_after``, at most 0.5 s) for a fresh one: when this process itself was paused (CPU
  starvation, a long collection, a suspended laptop) the stream's thread has the server's
  newer states waiting in its socket, and an effect must not be refused for the agent's own
  pause. A state is only ever taken when it is fresh, so this never lets a stale one through;
* a state the server itself marks unreadable (its database is down) reads as halted.

So a halt reaches a connected agent within one change notification (the server looks at its
database every 50 ms), and an agent that stops hearing from the server refuses effects within
``stale_after`` + ``grace`` seconds.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
from agent_saga import HaltState

from .http import ServerClient, ServerRefused, ServerUnreachable


class ServerKillSwitch:
    """The kill switch of a control plane (see the module docstring)."""

    def __init__(self, client: ServerClient, *, stale_after: float = 1.0) -> None:
        self.client = client
        self.stale_after = stale_after
        self.grace = min(0.5, stale_after / 2)
        self._latest: tuple[HaltState, float] | None = None
        self._arrived = threading.Condition()
        self.error = "no state received yet"
        self.received = 0
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="agent-saga-switch")
        self._thread.start()

    def wait_first(self, timeout: float) -> bool:
        """Wait until the first state arrived (True) or ``timeout`` passed."""
        return self._first.wait(timeout)

    def state(self) -> HaltState:
        latest = self._latest
        if latest is None or time.monotonic() - latest[1] > self.stale_after:
            latest = self._fresh_within(self.grace)
        where = self.client.url
        if latest is None:
            reason = f"kill switch unknown: no state from the control plane {where} ({self.error})"
            return HaltState(True, reason, readable=False)
        state, at = latest
        age = time.monotonic() - at
        if age > self.stale_after:
            reason = (
                f"kill switch stale: no word from the control plane {where} for {age:.1f} s "
                f"({self.error})"
            )
            return HaltState(True, reason, readable=False)
        return state

    def _fresh_within(self, timeout: float) -> tuple[HaltState, float] | None:
        """The latest state once it is fresh, waiting up to ``timeout`` seconds for one; the
        latest (stale or missing) when none came."""

        def fresh() -> bool:
            latest = self._latest
            return latest is not None and time.monotonic() - latest[1] <= self.stale_after

        with self._arrived:
            self._arrived.wait_for(fresh, timeout)
        return self._latest

    def halt(self, reason: str, *, at: float) -> None:
        """Halt the fleet; the local state is halted at once.

        Raises:
            ConnectionError: the server did not take the halt (it may not be engaged fleet-wide).
        """
        with self._arrived:
            self._latest = (HaltState(True, reason, at), time.monotonic())
            self._arrived.notify_all()
        try:
            self.client.post("/v1/killswitch/halt", {"reason": reason})
        except (ServerUnreachable, ServerRefused) as exc:
            raise ConnectionError(f"kill switch halt failed at {self.client.url}: {exc}") from exc

    def resume(self) -> None:
        """Resume the fleet (an admin token is needed: an agent token gets an error).

        Raises:
            ConnectionError: the server refused or did not answer.
        """
        try:
            self.client.post("/v1/killswitch/resume", {"reason": "resumed from an AgentKit"})
        except (ServerUnreachable, ServerRefused) as exc:
            raise ConnectionError(f"kill switch resume failed at {self.client.url}: {exc}") from exc

    def describe(self) -> dict[str, object]:
        return {
            "kind": "server",
            "where": self.client.url,
            "checked": "before every effect, from the state the server pushes (no round trip)",
            "stale_after_seconds": self.stale_after,
            "fail_closed": True,
        }

    def close(self) -> None:
        """Stop the stream's thread and close its connection; the switch then reads as stale."""
        self._stop.set()
        self._thread.join(5.0)
        self.client.close()

    def _take(self, data: dict[str, Any]) -> None:
        readable = bool(data.get("readable", True))
        halted = bool(data.get("halted", True)) or not readable
        reason = str(data.get("reason", ""))
        since = data.get("since")
        state = HaltState(halted, reason, since if isinstance(since, float) else None, readable)
        with self._arrived:
            self._latest = (state, time.monotonic())
            self._arrived.notify_all()
        self.received += 1
        self._first.set()

    def _run(self) -> None:
        timeout = httpx.Timeout(5.0, read=max(2.0, self.stale_after * 2))
        while not self._stop.is_set():
            try:
                with self.client.raw.stream(
                    "GET", "/v1/killswitch/stream", timeout=timeout
                ) as response:
                    if response.status_code != 200:
                        self.error = f"the stream was refused: HTTP {response.status_code}"
                        self._stop.wait(1.0)
                        continue
                    for line in response.iter_lines():
                        if self._stop.is_set():
                            return
                        if line.startswith("data: "):
                            self._take(json.loads(line[6:]))
                    self.error = "the stream ended"
            except (httpx.HTTPError, ValueError) as exc:
                self.error = f"{type(exc).__name__}: {exc}"[:300]
            self._stop.wait(0.2)


__all__ = ["ServerKillSwitch"]
