"""Shared fixtures for this package's tests."""
