"""Slack approvals for agent-saga, built on slack-bolt."""

from ._ids import approver_id

__all__ = ["approver_id"]
