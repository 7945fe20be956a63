"""agent-saga transactions in OpenTelemetry traces.

:class:`OTelObserver` turns a kit's sagas, steps, gate refusals and compensations into spans
(with ``agent_saga.saga.id`` on each) and puts the saga id in the baggage of the transaction's
context; :class:`SagaIdSpanProcessor` copies it onto every other span started there;
:class:`ExportCheckingSpanProcessor` exports spans and says, from ``force_flush()``, whether
they were delivered. Linking LangChain runs (``agent_saga_otel.langchain``), LangSmith runs
(``agent_saga_otel.langsmith``), LlamaIndex spans (``agent_saga_otel.llamaindex``) and a
one-call Phoenix setup (``agent_saga_otel.phoenix``) are in their own modules, imported only
when used. Nothing here installs a global tracer provider.
"""

import importlib
from typing import TYPE_CHECKING

from ._names import RUN_METADATA_KEY, SAGA_ID, saga_tag
from ._observer import OTelObserver
from ._version import VERSION as __version__

if TYPE_CHECKING:
    from ._export import ExportCheckingSpanProcessor
    from ._processor import SagaIdSpanProcessor

_NEED_THE_SDK = {
    "ExportCheckingSpanProcessor": "agent_saga_otel._export",
    "SagaIdSpanProcessor": "agent_saga_otel._processor",
}


def __getattr__(name: str) -> object:
    # The processors need the OpenTelemetry SDK, which this package does not depend on.
    module = _NEED_THE_SDK.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'agent_saga_otel' has no attribute {name!r}")


__all__ = [
    "ExportCheckingSpanProcessor",
    "OTelObserver",
    "RUN_METADATA_KEY",
    "SAGA_ID",
    "SagaIdSpanProcessor",
    "__version__",
    "saga_tag",
]
