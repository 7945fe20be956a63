"""Offline mesh sagas: devices that act offline, each with its own chained log and signing key
(an origin), merged later as a grow-only set of records keyed by ``(origin, seq)``.

Owns: reading and checking one origin's branch (``origin``), the mesh directory on disk
(``layout``), the merge (``merge``), the merged view ordered by hybrid logical clocks (``clock``,
``view``, ``source``), the conflicts found in it (``conflicts``), certify on a merged log
(``certify``) and a device's side of a sync (``sync``).

Part of the proofs layer: a device's records count in a merge only once its own key, its
chain and its checkpoints vouch for them, which is this layer's work; it also reads saga
histories (``_history``) for the conflicts. May import: the foundation modules, ``_log``,
``_postgres``, ``_gate``, ``_engine``, ``_history`` and the other modules of ``proofs``.

Entry points: :func:`~agent_saga.proofs._mesh.merge.merge_logs`,
:func:`~agent_saga.proofs._mesh.view.merged_view`,
:func:`~agent_saga.proofs._mesh.certify.certify_merged`.
"""
