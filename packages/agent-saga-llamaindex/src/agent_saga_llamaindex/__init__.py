"""LlamaIndex tools and agents inside agent-saga transactions."""
