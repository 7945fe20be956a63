"""Predictive pre-execution: REVERSIBLE steps run ahead of the model's confirmation, under a lease.

Owns: the rotating lease keys in the home (``keys``), the lease itself, issued and checked
(``lease``), the durable record of redeemed leases (``spent``), and a saga's table of steps run
ahead, which the engine asks through its :class:`~agent_saga._engine.ahead.AheadCalls` protocol
(``ledger``).

May import: the foundation modules, ``_log``, ``_postgres``, ``_gate`` and ``_engine``.

Entry points: :class:`~agent_saga._speculate.ledger.Speculation` (what ``AgentKit.speculate``
and ``AgentKit.redeem`` use), :class:`~agent_saga._speculate.lease.Lease`.
"""
