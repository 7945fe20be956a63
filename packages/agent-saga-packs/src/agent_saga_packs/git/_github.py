"""GitHub pull requests through PyGithub (``pip install 'agent-saga-packs[git]'``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._per_process import PerProcess
from ._hosting import HostingError, PullRequest

if TYPE_CHECKING:
    from github.PullRequest import PullRequest as GithubPull
    from github.Repository import Repository

T = TypeVar("T")
DEFAULT_BASE_URL = "https://api.github.com"


class GitHubHosting:
    """A GitHub repository (``"owner/name"``) reached with a token.

    Args:
        full_name: ``"owner/name"``.
        token: a token allowed to open, close and merge pull requests.
        base_url: the REST API root (GitHub Enterprise: ``https://HOST/api/v3``).
        options: passed to ``github.Github`` (``timeout``, ``retry``,
            ``seconds_between_writes``, ...).

    A PyGithub client is built on first use in each process (never shared across a fork).
    """

    name = "github"

    def __init__(
        self, full_name: str, *, token: str, base_url: str = DEFAULT_BASE_URL, **options: Any
    ) -> None:
        if full_name.count("/") != 1:
            raise ValueError(f"full_name is 'owner/name', got {full_name!r}")
        self.full_name = full_name
        self.owner = full_name.split("/", maxsplit=1)[0]
        self._repo = PerProcess(lambda: _connect(full_name, token, base_url, options))

    def __repr__(self) -> str:
        return f"GitHubHosting({self.full_name!r})"  # never the token

    def _call(self, action: str, call: Callable[[Repository], T]) -> T:
        from github import GithubException

        try:
            return call(self._repo.get())
        except GithubException as failed:
            data: object = failed.data
            message = data.get("message") if isinstance(data, dict) else data
            raise HostingError(f"github: {action}: {failed.status} {message}") from None

    def open(self, head: str, base: str, title: str, body: str) -> PullRequest:
        return self._call(
            f"open a pull request from {head} into {base}",
            lambda repo: _pull(repo.create_pull(base=base, head=head, title=title, body=body)),
        )

    def get(self, number: int) -> PullRequest:
        return self._call(f"read pull request #{number}", lambda repo: _pull(repo.get_pull(number)))

    def find(self, head: str, marker: str) -> PullRequest | None:
        def search(repo: Repository) -> PullRequest | None:
            for pull in repo.get_pulls(state="all", head=f"{self.owner}:{head}"):
                if marker in (pull.body or ""):
                    return _pull(pull)
            return None

        return self._call(f"list pull requests from {head}", search)

    def close(self, number: int) -> PullRequest:
        def close(repo: Repository) -> PullRequest:
            pull = repo.get_pull(number)
            pull.edit(state="closed")
            return _pull(pull)

        return self._call(f"close pull request #{number}", close)

    def merge(self, number: int, head_sha: str, trailer: str) -> PullRequest:
        def merge(repo: Repository) -> PullRequest:
            pull = repo.get_pull(number)
            # GitHub's title stays its own ("Merge pull request #N from ..."); the message
            # body is the pull request's title and the trailer.
            message = f"{pull.title}\n\n{trailer}"
            status = pull.merge(commit_message=message, merge_method="merge", sha=head_sha)
            if not status.merged:
                raise HostingError(f"github: merge pull request #{number}: {status.message}")
            return {**_pull(repo.get_pull(number)), "merge_sha": status.sha}

        return self._call(f"merge pull request #{number}", merge)


def _connect(full_name: str, token: str, base_url: str, options: dict[str, Any]) -> Repository:
    from github import Auth, Github

    client = Github(base_url=base_url, auth=Auth.Token(token), lazy=True, **options)
    return client.get_repo(full_name)


def _pull(pull: GithubPull) -> PullRequest:
    state = "merged" if pull.merged else str(pull.state)
    return {
        "number": pull.number,
        "url": pull.html_url,
        "state": state,
        "head": pull.head.ref,
        "base": pull.base.ref,
        "head_sha": pull.head.sha,
        "merge_sha": pull.merge_commit_sha if pull.merged else None,
        "body": pull.body or "",
    }
