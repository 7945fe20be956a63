"""``agent-saga sagas --limit/--since``: the newest sagas, a page at a time.

A home's file log answers through its saga index (:mod:`agent_saga._history.indexed`), reading
only the sagas shown; a fleet or merged log, or a file log the index cannot answer for, is read
in full and the same page cut from it, so the answer never depends on which way it was found.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from .._history.indexed import newest_views
from .._history.views import SagaView
from .._log.files import LOG_NAME
from .._log.records import SagaStatus
from ._errors import BadInputError
from ._logfile import read_history, through_index
from ._settings import Settings

_AGE = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, now: float) -> int:
    """Milliseconds since the epoch that ``--since`` names: an age (``90m``, ``12h``, ``7d``)
    counted back from ``now`` (seconds), or an ISO 8601 date or time, UTC unless it says.

    Raises:
        BadInputError: neither form.
    """
    age = _AGE.match(text)
    if age is not None:
        return int((now - int(age.group(1)) * _UNIT_SECONDS[age.group(2)]) * 1000)
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadInputError(
            f"--since {text!r} is neither an ISO date or time nor an age such as 90m, 12h, 7d"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def newest_sagas(
    settings: Settings, limit: int | None, since: int | None, status: SagaStatus | None
) -> tuple[list[SagaView], str]:
    """Up to ``limit`` sagas (all when ``None``), newest first, begun at or after ``since``
    (milliseconds), with ``status``; and where the log is, for messages.

    Raises:
        CliError: the log is missing, corrupt or unreadable.
    """
    wanted = limit if limit is not None else 1 << 62
    found = through_index(
        settings, lambda index: newest_views(index, limit=wanted, since=since, status=status)
    )
    if found is not None:
        return found, str(settings.home / LOG_NAME)
    history, where = read_history(settings)
    views = [
        v
        for v in reversed(history.sagas)
        if (status is None or v.status is status) and (since is None or v.started >= since)
    ]
    return views[:wanted], where
