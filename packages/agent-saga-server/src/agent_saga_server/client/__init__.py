"""The agent's side: an AgentKit pointed at a control plane (``AgentKit(server=..., token=...)``).

``connection`` (what the kit gets, and the ``agent_saga.connectors`` entry point), ``shipper``
(records and checkpoints in the background), ``killswitch`` (pushed state, fail-closed),
``approvals`` (the core's approvals with the server as channel), ``budgets`` (a BudgetStore
over HTTP) and ``http`` (the requests themselves). Nothing here imports FastAPI.
"""

from .connection import ServerConnection, connect

__all__ = ["ServerConnection", "connect"]
