"""LangChain tools and agent loops inside agent-saga transactions."""
