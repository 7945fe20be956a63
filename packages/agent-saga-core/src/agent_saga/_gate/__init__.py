"""The pre-flight gate: decisions, rules, budgets and the kill switch, consulted before an effect.

Owns: the closed set of decisions and the monotone fold over rules (``decisions``), the rule
library (``rules``, ``typecheck``), risk scoring (``risk``, with its labelled calls in
``data/``), validator consensus (``consensus``), budgets and their file, memory and PostgreSQL
stores (``budget``, ``budget_store``, ``budget_file``, ``budget_pg``), the kill switch
(``killswitch``, ``killswitch_pg``), and what the manifest says of the gate (``report``).

May import: the foundation modules, ``_log`` and ``_postgres``.

Entry points: :class:`~agent_saga._gate.decisions.Gate`, ``Allow`` / ``Deny`` /
``RequireApproval``, :class:`~agent_saga._gate.budget.Budget`, ``FileKillSwitch``.
"""
