"""The adapter runs the real, installed framework, and imports no other framework."""

from __future__ import annotations

import importlib

from agent_saga.testing import installed_from, modules_after_import

OTHER_FRAMEWORKS = {"langchain_core", "llama_index", "agents"} - {"agents"}


def test_the_framework_is_the_installed_distribution() -> None:
    assert installed_from(importlib.import_module("agents"), "openai-agents")


def test_the_adapter_imports_its_own_framework_only() -> None:
    loaded = modules_after_import("agent_saga_openai_agents")
    assert "agents" in loaded
    assert loaded & OTHER_FRAMEWORKS == set()
