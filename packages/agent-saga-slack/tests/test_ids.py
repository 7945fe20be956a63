"""Slack users vote as ``slack:<user id>``; anything else is not a Slack user id."""

from __future__ import annotations

import pytest
from agent_saga_slack import approver_id


def test_a_slack_user_votes_as_slack_and_its_user_id() -> None:
    assert approver_id("U0123ABCD") == "slack:U0123ABCD"
    assert approver_id("W0123ABCD") == "slack:W0123ABCD"


@pytest.mark.parametrize("bad", ["", "U", "u123", "T0123ABCD", "U123 or 1=1", "U" + "A" * 60])
def test_anything_else_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a Slack user id"):
        approver_id(bad)
