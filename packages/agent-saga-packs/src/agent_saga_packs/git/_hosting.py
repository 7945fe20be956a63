"""What the git pack needs from a code host, whatever its API calls a pull request.

GitHub's pull requests and GitLab's merge requests are both :data:`PullRequest` here: a
JSON-ready mapping (it goes into the saga's log as a step result) with ``number`` (GitLab's
``iid``), ``url``, ``state`` (``"open"``, ``"closed"`` or ``"merged"``), ``head``, ``base``,
``head_sha``, ``merge_sha`` and ``body``.
"""

from __future__ import annotations

from typing import Any, Protocol

PullRequest = dict[str, Any]


class HostingError(Exception):
    """The code host refused a request; the message names the host, the action and why."""


class Hosting(Protocol):
    """A repository on a code host (:class:`GitHubHosting`, :class:`GitLabHosting`)."""

    name: str
    """How refusals name the host (``"github"``, ``"gitlab"``)."""

    def open(self, head: str, base: str, title: str, body: str) -> PullRequest:
        """Open a pull request from ``head`` into ``base``."""
        ...

    def get(self, number: int) -> PullRequest: ...

    def find(self, head: str, marker: str) -> PullRequest | None:
        """The pull request from ``head`` (in any state) whose body contains ``marker``."""
        ...

    def close(self, number: int) -> PullRequest:
        """Close an open pull request without merging it."""
        ...

    def merge(self, number: int, head_sha: str, trailer: str) -> PullRequest:
        """Merge with a merge commit, only if ``head`` is still at ``head_sha``; the merge
        commit's message ends with the line ``trailer``. Returns the merged pull request (with
        ``merge_sha``)."""
        ...
