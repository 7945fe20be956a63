"""Predictive pre-execution: REVERSIBLE steps run ahead of the model's confirmation, under a lease.

Owns: the rotating lease keys in the home (``keys``), the lease itself, issued and checked
(``lease``), the durable record of redeemed leases (``spent``), a saga's table of steps run
ahead, which the engine asks through its :class:`~agent_saga._engine.ahead.AheadCalls` protocol
(``ledger``), and speculating and redeeming, sync and async (``run``).

Part of the engine layer: it imports the engine's modules and the layers below; the engine's
other modules know it only through that protocol, never by import. This ``__init__`` imports
nothing, so loading the engine loads none of it.

Entry points: :class:`~agent_saga._engine.speculation.ledger.Speculation` (what
``AgentKit.speculate`` and ``AgentKit.redeem`` use),
:class:`~agent_saga._engine.speculation.lease.Lease`.
"""
