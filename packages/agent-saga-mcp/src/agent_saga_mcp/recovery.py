"""Import this module in ``agent-saga recover`` to finish a dead gateway's rollbacks.

A gateway records, before each COMPENSABLE call, the name of its compensation
(``mcp:<gateway>/<upstream>/<tool>``). Another process can run it once that name is registered
there. This module registers, when imported, a compensator for every compensation (and a probe
for every probe) declared in the gateway configuration(s) named by ``AGENT_SAGA_MCP_CONFIG``
(several paths separated by ``os.pathsep``)::

    AGENT_SAGA_MCP_CONFIG=gateway.toml agent-saga recover --import agent_saga_mcp.recovery

(or list ``agent_saga_mcp.recovery`` under ``imports`` in ``agent-saga.toml``). Each
compensation connects to its upstream as the gateway did (starting it by command, or by URL),
calls the compensation tool with the arguments mapped from the step's logged arguments and
result, and disconnects. Without the variable the import fails, and so does ``recover``: a
recovery that could not load the compensations would escalate every saga that needs them.
"""

from __future__ import annotations

import os
from pathlib import Path

from ._config import ConfigError
from ._config_read import load_config
from ._recovery import register_compensations

ENV = "AGENT_SAGA_MCP_CONFIG"


def _from_environment() -> None:
    paths = [p for p in os.environ.get(ENV, "").split(os.pathsep) if p]
    if not paths:
        raise ImportError(
            f"set {ENV} to the gateway's configuration file so its compensations can register"
        )
    for path in paths:
        try:
            register_compensations(load_config(Path(path)))
        except ConfigError as exc:
            raise ImportError(str(exc)) from exc


_from_environment()

__all__ = ["ENV"]
