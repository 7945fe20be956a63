"""PostgreSQL for fleet mode: sessions, the shared log store, owners and leases.

Owns: connections and the server's durability settings (``connection``), the schema's tables
(``schema``), owner heartbeats and recovery leases (``owners``), the statements (``sql``), and
the PostgreSQL ``LogStore`` (``store``) with its group commit (``commit``), its batches
(``write``) and its checked reads (``read``). psycopg is imported only when one of these is
used.

May import: the foundation modules and ``_log``. The PostgreSQL kill switch and budget store
implement the gate's protocols, so they live in ``_gate`` beside their file siblings and use
this package's sessions.

Entry points: :class:`~agent_saga._postgres.store.PostgresLogStore`,
:class:`~agent_saga._postgres.connection.PgSession`.
"""
