"""Approvals through the control plane: the core's approval flow, with the server as channel.

:class:`ServerApprovals` is the core's :class:`agent_saga.Approvals`: the request is built,
bound to the action's digest and logged durably by the core, and the core's waiter counts the
votes it finds in the local log (allowed approver, once each, quorum, expiry, the digest
re-checked after the decision). What changes is where the votes come from:

* the request is posted to the server (``POST /v1/approvals?wait=...``) by a background
  thread, and posted again if the server later answers that it does not know it (the server
  commits a request without waiting for its disk; a host crash can lose it until the first
  vote);
* the post's answer waits for the decision, and while none comes the thread long-polls the
  request (``GET /v1/approvals/{id}?wait=...``); when the server has decided it (approvers
  vote there, each as the subject of their own token, and the server decides each request
  once), the thread writes the server's votes into the local log with
  :func:`agent_saga.submit_vote` and wakes the waiting step, which finds them there at once.
  The votes are written without a sync of their own: they are durable on the server, and the
  step's ``approval.decided`` record, appended durably before the step acts, makes them durable
  in the local log too (one sync on the way to the decision instead of two). A vote cast with a
  passkey on the dashboard carries its proof: the approver's key is written first as a
  ``passkey.registered`` record (:func:`agent_saga.register_passkey`), then the vote with its
  WebAuthn assertion, which the core checks again before it counts (``require_passkey``).

Who may approve: the approvers given, else every subject that holds a valid approver token on
the server when the request is made (``GET /v1/approvers``), as the server listed them at most
``approvers_fresh`` seconds before (5 s by default; 0 asks before every request): an approver
token made within that time may not vote on the requests of that time (the server refuses the
vote, 403), and one revoked within it cannot vote at all (the server checks the token). When
the list cannot be read the request has no approver and the core refuses the call (fail
closed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from agent_saga import ApprovalRequest, Approvals, LogStore, register_passkey, submit_vote
from agent_saga.proofs import PasskeyKey

from .http import ServerClient, ServerRefused, ServerUnreachable


class ServerChannel:
    """Posts requests to the server and brings its decisions back as votes in the local log."""

    def __init__(self, client: ServerClient) -> None:
        self.client = client
        self.store: LogStore | None = None
        self.errors: list[str] = []
        self.closed = threading.Event()
        """Set when the kit closes: the threads following requests stop."""
        self.delivered: set[str] = set()
        """Requests whose votes this channel has written to the log (under ``arrived``)."""
        self.arrived = threading.Condition()

    def request_posted(self, request: ApprovalRequest) -> None:
        threading.Thread(
            target=self._follow, args=(request,), daemon=True, name=f"agent-saga-{request.id}"
        ).start()

    def request_decided(self, request: ApprovalRequest, decision: str) -> None:
        """Nothing to do: the ``approval.decided`` record reaches the server with the log."""

    def _note(self, text: str) -> None:
        self.errors = [*self.errors[-19:], text[:300]]

    def _follow(self, request: ApprovalRequest) -> None:
        body = {
            "id": request.id, "saga": request.saga, "ordinal": request.ordinal,
            "tool": request.tool, "semantics": request.semantics, "digest": request.digest,
            "args": request.args, "rule": request.rule[:2000], "reason": request.reason[:2000],
            "approvers": list(request.approvers), "quorum": request.quorum,
            "expires_at": request.expires_at,
        }  # fmt: skip

        def post() -> Any:  # the answer waits for the decision, as the long-poll does
            wait = max(0.0, min(5.0, request.expires_at - time.time()))
            return self.client.post("/v1/approvals", body, params={"wait": wait})

        row = self._retry(post, request)
        while row is not None and row["status"] == "pending":
            if time.time() >= request.expires_at or self.closed.is_set():
                return
            wait = max(0.0, min(5.0, request.expires_at - time.time()))
            try:
                row = self.client.get(f"/v1/approvals/{request.id}", params={"wait": wait})
            except ServerRefused as exc:
                self._note(f"{request.id}: {exc}")
                if exc.status == 404:  # lost by a host crash before it was flushed: again
                    row = self._retry(post, request)
                    continue
                self.closed.wait(0.5)
            except ServerUnreachable as exc:
                self._note(f"{request.id}: {exc}")
                self.closed.wait(0.5)
        if row is not None:
            self._deliver(request, row)

    def _retry(self, call: Any, request: ApprovalRequest) -> dict[str, Any] | None:
        """``call()``'s answer, retried while the server is unreachable or does not know the
        request (lost, see the module docstring); ``None`` when it is refused otherwise, or the
        request expires or the kit closes first."""
        while time.time() < request.expires_at and not self.closed.is_set():
            try:
                answer: dict[str, Any] = call()
                return answer
            except ServerUnreachable as exc:
                self._note(f"{request.id}: {exc}")
                self.closed.wait(0.5)
            except ServerRefused as exc:
                self._note(f"{request.id}: refused by the server: {exc}")
                if exc.status != 404:  # 404: the request was lost while the answer waited
                    return None
                self.closed.wait(0.5)
        return None

    def _deliver(self, request: ApprovalRequest, row: dict[str, Any]) -> None:
        store = self.store
        if store is None:
            return
        for vote in row.get("votes", []):
            note = f"via the control plane: {vote.get('note', '')}".strip()
            passkey = self._passkey(store, vote.get("passkey"))
            submit_vote(
                store, request.id, str(vote["approver"]), str(vote["decision"]),
                channel="server-passkey" if passkey else "server", note=note[:2000],
                passkey=passkey, sync=False,
            )  # fmt: skip
        with self.arrived:
            self.delivered.add(request.id)
            self.arrived.notify_all()

    def wait_for(self, request_id: str, seconds: float) -> None:
        """Return once votes for ``request_id`` are in the log, or after ``seconds``."""
        with self.arrived:
            if self.arrived.wait_for(lambda: request_id in self.delivered, seconds):
                self.delivered.discard(request_id)

    def _passkey(self, store: LogStore, proof: Any) -> dict[str, Any] | None:
        """A passkey vote's assertion, once its key is registered in the log (a key the log
        holds already is not written again); ``None`` for a vote without a passkey."""
        if not isinstance(proof, dict):
            return None
        key = PasskeyKey.from_data(proof.get("key") or {})
        if key is None:
            self._note("a passkey vote came without its key")
            return {k: v for k, v in proof.items() if k != "key"}
        registered = register_passkey(store, key, by=f"control plane {self.client.url}")
        if registered.problem is not None:
            self._note(f"passkey of {key.approver} not registered: {registered.problem}")
        return {k: v for k, v in proof.items() if k != "key"}


class ServerApprovals(Approvals):
    """The core's approvals with :class:`ServerChannel` (see the module docstring).

    The decision reaches the channel's thread as soon as the server has it (a long-poll the
    server answers when the request changes), and the thread wakes the waiting step once it has
    written the votes to the local log; ``poll`` is how often the step also looks at the log
    for votes written there otherwise (``agent-saga approve`` on this host);
    ``approvers_fresh`` how long the server's list of approvers is reused when ``approvers`` is
    empty (see the module docstring).
    """

    def __init__(
        self,
        client: ServerClient,
        *,
        approvers: Iterable[str] = (),
        expires_after: float = 600.0,
        poll: float = 0.05,
        require_passkey: bool = False,
        approvers_fresh: float = 5.0,
    ) -> None:
        self.channel = ServerChannel(client)
        self.client = client
        super().__init__(
            approvers=approvers, expires_after=expires_after, channels=[self.channel], poll=poll,
            require_passkey=require_passkey,
        )  # fmt: skip
        self._fixed = bool(self.approvers)
        self.approvers_fresh = approvers_fresh
        self._listed: tuple[float, tuple[str, ...]] | None = None
        """When the server's approvers were last read (``time.monotonic()``), and who."""

    def pause(self, request: ApprovalRequest, clock: Any, seconds: float) -> None:
        self.channel.wait_for(request.id, seconds)

    def approve_step(self, step: Any) -> tuple[str, str] | None:
        if not self._fixed:
            self.approvers = self._server_approvers()
        return super().approve_step(step)

    def _server_approvers(self) -> tuple[str, ...]:
        """The server's approvers, read at most ``approvers_fresh`` seconds ago; none when
        they cannot be read (and the next request asks again)."""
        listed, now = self._listed, time.monotonic()
        if listed is not None and now - listed[0] < self.approvers_fresh:
            return listed[1]
        try:
            found = tuple(str(a) for a in self.client.get("/v1/approvers")["approvers"])
        except (ServerUnreachable, ServerRefused) as exc:
            self.channel._note(f"approvers unknown: {exc}")
            self._listed = None
            return ()
        self._listed = (now, found)
        return found

    def describe(self) -> dict[str, Any]:
        described = dict(super().describe())
        described["via"] = f"control plane {self.client.url}"
        if not self._fixed:
            described["approvers"] = (
                "every approver token of the server, as listed at most "
                f"{self.approvers_fresh:g} s before the request"
            )
        return described


__all__ = ["ServerApprovals", "ServerChannel"]
