"""GitLab merge requests through python-gitlab (``pip install 'agent-saga-packs[git]'``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._per_process import PerProcess
from ._hosting import HostingError, PullRequest

if TYPE_CHECKING:
    from gitlab.v4.objects import Project, ProjectMergeRequest

T = TypeVar("T")
DEFAULT_URL = "https://gitlab.com"
_STATES = {"opened": "open", "locked": "open", "closed": "closed", "merged": "merged"}


class GitLabHosting:
    """A GitLab project (``"group/project"`` or its numeric id) reached with a token.

    Args:
        project: the project's path or id.
        token: a token allowed to open, close and merge merge requests.
        url: the GitLab instance.
        options: passed to ``gitlab.Gitlab`` (``timeout``, ``retry_transient_errors``, ...).

    A python-gitlab client is built on first use in each process (never shared across a fork).
    """

    name = "gitlab"

    def __init__(
        self, project: str | int, *, token: str, url: str = DEFAULT_URL, **options: Any
    ) -> None:
        self.project = project
        self._project = PerProcess(lambda: _connect(project, token, url, options))

    def __repr__(self) -> str:
        return f"GitLabHosting({self.project!r})"  # never the token

    def _call(self, action: str, call: Callable[[Project], T]) -> T:
        from gitlab.exceptions import GitlabError

        try:
            return call(self._project.get())
        except GitlabError as failed:
            raise HostingError(
                f"gitlab: {action}: {failed.response_code} {failed.error_message}"
            ) from None

    def open(self, head: str, base: str, title: str, body: str) -> PullRequest:
        fields = {"source_branch": head, "target_branch": base, "title": title, "description": body}
        return self._call(
            f"open a merge request from {head} into {base}",
            lambda project: _request(project.mergerequests.create(fields)),
        )

    def get(self, number: int) -> PullRequest:
        return self._call(
            f"read merge request !{number}",
            lambda project: _request(project.mergerequests.get(number)),
        )

    def find(self, head: str, marker: str) -> PullRequest | None:
        def search(project: Project) -> PullRequest | None:
            for found in project.mergerequests.list(source_branch=head, state="all", get_all=True):
                if marker in (found.description or ""):
                    return _request(found)
            return None

        return self._call(f"list merge requests from {head}", search)

    def close(self, number: int) -> PullRequest:
        def close(project: Project) -> PullRequest:
            request = project.mergerequests.get(number)
            request.state_event = "close"
            request.save()
            return _request(request)

        return self._call(f"close merge request !{number}", close)

    def merge(self, number: int, head_sha: str, trailer: str) -> PullRequest:
        def merge(project: Project) -> PullRequest:
            request = project.mergerequests.get(number)
            message = (
                f"Merge branch '{request.source_branch}' into '{request.target_branch}'\n\n"
                f"{request.title}\n\n{trailer}"
            )  # GitLab's default message, with the trailer
            request.merge(merge_commit_message=message, sha=head_sha)
            merged = _request(request)
            if merged["state"] != "merged":
                raise HostingError(f"gitlab: merge merge request !{number}: {merged['state']}")
            return merged

        return self._call(f"merge merge request !{number}", merge)


def _connect(project: str | int, token: str, url: str, options: dict[str, Any]) -> Project:
    import gitlab

    client = gitlab.Gitlab(url, private_token=token, **options)
    return client.projects.get(project, lazy=True)


def _request(request: Any) -> PullRequest:
    """A merge request (a ``ProjectMergeRequest``, or one from a list) as a :data:`PullRequest`."""
    found: ProjectMergeRequest = request
    state = _STATES.get(str(found.state), str(found.state))
    return {
        "number": int(found.iid),
        "url": str(found.web_url),
        "state": state,
        "head": str(found.source_branch),
        "base": str(found.target_branch),
        "head_sha": found.sha,
        "merge_sha": found.merge_commit_sha if state == "merged" else None,
        "body": found.description or "",
    }
