"""What the log says happened, and finishing what a dead process left undone.

Owns: read-only views of sagas rebuilt from records (``views``, ``build``, ``ahead`` for steps
run ahead of confirmation, ``lookup`` for a saga by id or prefix), recovery of abandoned sagas
(``recovery``), continuing suspended ones (``resume``) and settling the budget reservations they
left (``budgets``).

May import: the foundation modules, ``_log``, ``_postgres``, ``_gate`` and ``_engine``.

Entry points: :func:`~agent_saga._history.build.build_history`,
:func:`~agent_saga._history.recovery.recover`.
"""
