"""OpenAI Agents SDK tools and runs inside agent-saga transactions."""
