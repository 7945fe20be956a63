"""Human approvals: requests bound to an action digest, votes (signed or not), quorum and expiry.

Owns: the request, its digest and approver keys (``request``), the channel that posts requests
and counts votes from the log (``channel``), and the engine's side of one step's approval
(``step``), which implements the engine's ``StepApprover`` protocol.

May import: the foundation modules, ``_log``, ``_postgres``, ``_gate``, ``_engine``, ``_history``
and ``proofs`` (a signed vote is a C2SP signed note).

Entry points: :class:`~agent_saga._approvals.channel.Approvals`,
:func:`~agent_saga._approvals.channel.submit_vote`,
:func:`~agent_saga._approvals.request.action_digest`.
"""
