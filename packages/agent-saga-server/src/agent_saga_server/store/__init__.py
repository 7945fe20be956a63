"""The control plane's state: one SQL database (SQLite in the home, or PostgreSQL for fleets).

Modules: ``db`` (connections and transactions), ``schema`` (tables), ``tokens``, ``ingest``
(records, with ``summaries`` for the saga list), ``checkpoints``, ``sagas`` (listing and
views), ``approvals``, ``budgets`` and ``control`` (kill switch, audit trail). Nothing here
imports the HTTP layer.
"""
