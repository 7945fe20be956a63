"""Approver ids for Slack users: ``slack:<user id>``.

An approval request names who may decide it (``Approvals(approvers=[...])``); a Slack user
votes as ``slack:<their Slack user id>``, so ``Approvals(approvers=["slack:U123"])`` lets
exactly that user approve. The id comes from the verified request Slack sent (the framework
checked its signature), never from text the user typed.
"""

from __future__ import annotations

import re

PREFIX = "slack:"
_USER_ID = re.compile(r"^[UW][A-Z0-9]{1,40}$")


def approver_id(user_id: str) -> str:
    """The agent-saga approver id of a Slack user (``U0123ABCD`` -> ``slack:U0123ABCD``).

    Raises:
        ValueError: ``user_id`` does not look like a Slack user id (``U...`` or ``W...``).
    """
    if not _USER_ID.match(user_id):
        raise ValueError(f"not a Slack user id: {user_id[:60]!r}")
    return PREFIX + user_id
