"""Slack approvals for agent-saga, built on slack-bolt.

:class:`SlackApprovalChannel` shows the agents' approval requests in a Slack channel;
:class:`SlackApprovals` is the slack-bolt app whose buttons and ``/saga-approve`` command vote
on them, in the agents' own log. Slack users vote as ``slack:<user id>``.
"""

from ._app import SlackApprovals, SlackVote
from ._blocks import decided_blocks, request_blocks
from ._channel import PostedMessage, SlackApprovalChannel
from ._command import Command, parse_command
from ._ids import approver_id
from ._install import SCOPES, build_oauth_install_url, installation_store, oauth_settings
from ._refusals import RefusalLimit
from ._tokens import RotatingInstallationStore

__all__ = [
    "SCOPES",
    "Command",
    "PostedMessage",
    "RefusalLimit",
    "RotatingInstallationStore",
    "SlackApprovalChannel",
    "SlackApprovals",
    "SlackVote",
    "approver_id",
    "build_oauth_install_url",
    "decided_blocks",
    "installation_store",
    "oauth_settings",
    "parse_command",
    "request_blocks",
]
