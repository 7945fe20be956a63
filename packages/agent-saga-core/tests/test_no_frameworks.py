"""Importing agent_saga loads no agent framework; the helpers that show it tell fakes apart."""

from __future__ import annotations

import types

import pytest
from agent_saga.testing import installed_from, modules_after_import

FRAMEWORKS = {"langchain_core", "langsmith", "llama_index", "workflows", "agents", "openai"}


def test_importing_agent_saga_loads_no_framework() -> None:
    loaded = modules_after_import("agent_saga")
    assert "agent_saga" in loaded
    assert loaded & FRAMEWORKS == set()


def test_installed_from_tells_a_real_module_from_a_fake() -> None:
    assert installed_from(pytest, "pytest")
    assert not installed_from(pytest, "no-such-distribution")
    fake = types.ModuleType("langchain_core")
    assert not installed_from(fake, "langchain-core")
