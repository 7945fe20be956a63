"""Human approvals: requests bound to an action digest, votes (signed or not), quorum and expiry.

Owns: the request, its digest and approver keys (``request``); waiting for a step's approval,
with the channels that show requests and the count of votes read from the log (``wait``:
``Approvals`` implements the engine's ``StepApprover`` protocol); and giving a vote (``votes``).

May import: the foundation modules, ``_log``, ``_postgres``, ``_gate``, ``_engine``, ``_history``
and ``proofs`` (a signed vote is a C2SP signed note).

Entry points: :class:`~agent_saga._approvals.wait.Approvals`,
:func:`~agent_saga._approvals.votes.submit_vote`,
:func:`~agent_saga._approvals.request.action_digest`.
"""
