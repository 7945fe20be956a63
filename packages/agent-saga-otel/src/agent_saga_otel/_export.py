"""A span processor whose ``force_flush()`` says whether the spans reached the collector.

The SDK's processors answer ``force_flush()`` with whether their queue was drained in time, not
whether the export succeeded: with the collector down, the OTLP exporter retries for a few
seconds, logs ``Failed to export spans batch`` and gives up, and ``force_flush()`` still returns
``True``. :class:`ExportCheckingSpanProcessor` wraps an exporter to remember failed exports and
returns ``False`` from ``force_flush()`` when one failed. This module needs the SDK.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)


class _CountingExporter(SpanExporter):
    """Passes spans to an exporter and counts the exports that did not succeed."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self.failures = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.exporter.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            with self._lock:
                self.failures += 1
        return result

    def take_failures(self) -> int:
        with self._lock:
            failures, self.failures = self.failures, 0
        return failures

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


class ExportCheckingSpanProcessor(SpanProcessor):
    """Exports spans like the SDK's batch (or simple) processor, and reports failed exports.

    Args:
        exporter: where spans go (an OTLP exporter, Phoenix's...).
        batch: export in a background thread, in batches (``BatchSpanProcessor``); ``False``
            exports each span as it ends, on the caller's thread (``SimpleSpanProcessor``).

    ``force_flush()`` exports what is queued and returns ``True`` only if that finished in
    time and no export failed since the previous ``force_flush()`` (each failure is reported
    once). :attr:`failed_exports` counts the failures since the processor was made.
    """

    def __init__(self, exporter: SpanExporter, *, batch: bool = True) -> None:
        self._exporter = _CountingExporter(exporter)
        self._processor: SpanProcessor = (
            BatchSpanProcessor(self._exporter) if batch else SimpleSpanProcessor(self._exporter)
        )
        self._reported = 0

    @property
    def failed_exports(self) -> int:
        """Exports that failed since this processor was made."""
        return self._reported + self._exporter.failures

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._processor.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        self._processor.on_end(span)

    def shutdown(self) -> None:
        self._processor.shutdown()

    def force_flush(self, timeout_millis: int | None = None) -> bool:
        drained = self._processor.force_flush(30000 if timeout_millis is None else timeout_millis)
        failures = self._exporter.take_failures()
        self._reported += failures
        return drained and failures == 0
