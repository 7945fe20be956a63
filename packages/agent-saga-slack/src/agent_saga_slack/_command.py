"""``/saga-approve approve|deny <request id> [note]``: parsed strictly.

The verb is required and must be exactly ``approve`` or ``deny`` (any case): no verb, an unknown
verb (``yes``, ``ok``, ``approved``) or a missing request id is an error that records nothing,
never an approval.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._blocks import escape

VERBS = {"approve": "approve", "deny": "deny"}
TEXT_LIMIT = 3000
NOTE_LIMIT = 2000


@dataclass(frozen=True)
class Command:
    """A well-formed command: the vote to record."""

    decision: str
    request_id: str
    note: str


def usage(command: str) -> str:
    return (
        f"Usage: `{command} approve <request id> [note]` or `{command} deny <request id> [note]`."
        " Nothing was recorded."
    )


def parse_command(text: str, command: str = "/saga-approve") -> Command | str:
    """The vote a command asks for, or the error to reply with (a ``str``)."""
    if len(text) > TEXT_LIMIT:
        return f"The command is too long (over {TEXT_LIMIT} characters). " + usage(command)
    words = text.split(maxsplit=2)
    if not words:
        return "No verb given. " + usage(command)
    verb = words[0].lower()
    if verb not in VERBS:
        return f"Unknown verb `{escape(words[0][:40])}`. " + usage(command)
    if len(words) < 2:
        return "No request id given. " + usage(command)
    note = words[2].strip() if len(words) > 2 else ""
    return Command(VERBS[verb], words[1], note[:NOTE_LIMIT])
