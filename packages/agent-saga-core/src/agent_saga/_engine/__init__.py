"""The transaction engine: tools become logged, gated steps; failures compensate newest first.

Owns: tool semantics and specs (``semantics``), compensators and their calling convention
(``compensation``), what a rollback reports (``report``), observers (``observe``), the injected
parts of an engine (``runtime``), per-step state (``steps``), rollback (``rollback``), the
running saga and savepoints (``saga``), the transaction context manager (``transaction``),
``@tool`` (``tool``), the seam the framework adapters translate onto (``adapt``), the
self-healing loop (``selfheal``), and steps run ahead of confirmation: the protocol the saga and
``@tool`` ask (``ahead``) and its implementation, leases included (``speculation``).

May import: the foundation modules, ``_log``, ``_postgres`` and ``_gate``. Approvals are reached
through the :class:`~agent_saga._engine.runtime.StepApprover` protocol that ``_approvals``
implements, never imported.

Entry points: :class:`~agent_saga._engine.transaction.Transaction`,
:func:`~agent_saga._engine.tool.tool`, :class:`~agent_saga._engine.saga.Saga`,
:class:`~agent_saga._engine.adapt.ToolCallGuard`.
"""
