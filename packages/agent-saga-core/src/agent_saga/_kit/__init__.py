"""The one-object SDK: ``AgentKit``, the default kit, the guarantees manifest and status.

Owns: ``AgentKit`` and ``saga_scope`` with the process-wide default kit (``agentkit``), the
manifest and readiness computed from the live configuration (``manifest``), the kit's side of
speculation and of offline mesh sagas (``speculation``, ``mesh``), and this release's version
(``version``).

May import: every layer below it (the foundation modules, ``_log``, ``_postgres``, ``_gate``,
``_engine``, ``_speculate``, ``_history``, ``proofs``, ``_approvals``, ``_mesh``).

Entry points: :class:`~agent_saga._kit.agentkit.AgentKit`,
:func:`~agent_saga._kit.agentkit.saga_scope`, :func:`~agent_saga._kit.agentkit.default_kit`.
"""
