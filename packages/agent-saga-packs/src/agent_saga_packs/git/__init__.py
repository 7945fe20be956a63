"""Code hosting: branch, commit, push, pull requests and merges, each undone on failure.

Git operations run the ``git`` binary on a local clone (:class:`LocalRepository`); pull
requests go through PyGithub (:class:`GitHubHosting`) or python-gitlab
(:class:`GitLabHosting`), installed with ``pip install 'agent-saga-packs[git]'`` and imported
only when a request is made.
"""

from ._github import GitHubHosting
from ._gitlab import GitLabHosting
from ._hosting import Hosting, HostingError, PullRequest
from ._pack import GitPack, git_rules, marker
from ._repo import GitError, LocalRepository

__all__ = [
    "GitError",
    "GitHubHosting",
    "GitLabHosting",
    "GitPack",
    "Hosting",
    "HostingError",
    "LocalRepository",
    "PullRequest",
    "git_rules",
    "marker",
]
