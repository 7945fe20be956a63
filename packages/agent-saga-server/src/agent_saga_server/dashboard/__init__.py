"""The dashboard (``agent-saga ui``, and ``/ui`` of ``agent-saga cloud-server``): server-rendered
pages over the control plane's store, for the risk team in a browser."""

from .app import mount
from .sessions import mint_login

__all__ = ["mint_login", "mount"]
