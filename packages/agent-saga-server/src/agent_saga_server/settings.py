"""What a control-plane process is configured with (command-line options, or code)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServerSettings:
    """Settings of one server process; several processes on one PostgreSQL share only the data.

    Args:
        max_body_bytes: bodies above this are refused with 413 before they are buffered.
        page_limit: the most items one page of a list may hold (``limit`` above it is a 400).
        cors_origins: browser origins allowed to call the API; none (no CORS) by default.
        heartbeat: seconds between kill-switch messages on each agent's stream.
        watch_interval: seconds between this process's looks at the database for changes, in
            case a notification was missed (changes made through this process, and on
            PostgreSQL those of other replicas, are announced and seen at once).
        max_wait: the longest a long-poll may ask to wait, in seconds.
        max_waits_per_token: the most long-polls (``?wait=``) one token may hold open on this
            process at once; the next is answered 429 (a new request is stored and answered
            at once, without waiting). Every waiting long-poll reads again on each approval
            change, so this bounds what one client can make every vote cost.
    """

    max_body_bytes: int = 8 * 1024 * 1024
    page_limit: int = 500
    cors_origins: tuple[str, ...] = field(default_factory=tuple)
    heartbeat: float = 0.2
    watch_interval: float = 0.25
    max_wait: float = 30.0
    max_waits_per_token: int = 64


__all__ = ["ServerSettings"]
