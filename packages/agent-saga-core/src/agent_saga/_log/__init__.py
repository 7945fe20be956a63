"""The write-ahead log: records, their canonical encoding and chain, and the stores that keep them.

Owns: record kinds and envelopes (``records``), canonical JSON (``codec``), sealing and checking
the chain (``chain``), masking values at write time (``redaction``), the ``LogStore`` protocol
and the memory store (``store``), the durable file store with its file system seam, locks,
group commit, scanning and torn-tail repair (``filestore``, ``fs``, ``files``, ``locks``,
``groupcommit``, ``scan``, ``repair``, ``read``), following a log's tail (``follow``) and async
sinks (``sink``).

May import: the foundation modules (``agent_saga._errors``, ``_clock``, ``_config``) only.

Entry points: :class:`~agent_saga._log.store.LogStore`, ``FileLogStore``, ``MemoryLogStore``,
``read_log`` / ``verify_file``.
"""
