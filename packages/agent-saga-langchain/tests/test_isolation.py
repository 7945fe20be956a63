"""The adapter runs the real, installed framework, and imports no other framework."""

from __future__ import annotations

import importlib

from agent_saga.testing import installed_from, modules_after_import

OTHER_FRAMEWORKS = {"langchain_core", "llama_index", "agents"} - {"langchain_core"}


def test_the_framework_is_the_installed_distribution() -> None:
    assert installed_from(importlib.import_module("langchain_core"), "langchain-core")


def test_the_adapter_imports_its_own_framework_only() -> None:
    loaded = modules_after_import("agent_saga_langchain")
    assert "langchain_core" in loaded
    assert loaded & OTHER_FRAMEWORKS == set()
