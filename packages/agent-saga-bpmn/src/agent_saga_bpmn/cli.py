"""``agent-saga bpmn``: codegen and export, added to ``agent-saga`` by entry point (skeleton)."""

from __future__ import annotations

import click


@click.group()
def bpmn() -> None:
    """BPMN 2.0: flows to code, recorded sagas to diagrams."""
