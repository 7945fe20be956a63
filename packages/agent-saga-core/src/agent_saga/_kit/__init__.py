"""The one-object SDK: ``AgentKit``, the default kit, the guarantees manifest and status.

Owns: ``AgentKit`` (``agentkit``), ``saga_scope`` and ``use_kit`` with the process-wide
default kit (``defaults``), what a kit opens from its arguments and the configuration
(``stores``), its link to a control plane (``connect``), the manifest and readiness computed
from the live configuration (``manifest``), the kit's side of speculation and of offline mesh
sagas (``speculation``, ``mesh``), and this release's version (``version``).

May import: every layer below it (the foundation modules, ``_log``, ``_postgres``, ``_gate``,
``_engine``, ``_history``, ``proofs``, ``_approvals``).

Entry points: :class:`~agent_saga._kit.agentkit.AgentKit`,
:func:`~agent_saga._kit.defaults.saga_scope`, :func:`~agent_saga._kit.defaults.default_kit`.
"""
