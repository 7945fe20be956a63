"""The stand-in's state: repositories, their pull requests, real merges, authentication."""

from __future__ import annotations

import hmac
import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

TOKEN = os.environ.get("STAND_IN_TOKEN", "")
GIT_ENV = {
    **os.environ,
    "LC_ALL": "C",
    "GIT_AUTHOR_NAME": "Code Host",
    "GIT_AUTHOR_EMAIL": "host@127.0.0.1",
    "GIT_COMMITTER_NAME": "Code Host",
    "GIT_COMMITTER_EMAIL": "host@127.0.0.1",
}


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class Pull:
    number: int
    title: str
    body: str
    head: str
    base: str
    state: str = "open"  # open, closed, merged
    merge_sha: str | None = None
    created_at: str = field(default_factory=now)
    updated_at: str = field(default_factory=now)
    closed_at: str | None = None
    merged_at: str | None = None


@dataclass
class Repository:
    name: str
    path: str
    pulls: list[Pull] = field(default_factory=list)


REPOS: dict[str, Repository] = {}
LOCK = threading.Lock()


def git(repo: Repository, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", repo.path, *args], capture_output=True, text=True, env=GIT_ENV, check=False
    )


def branch_sha(repo: Repository, branch: str) -> str | None:
    done = git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")
    return done.stdout.strip() or None


def merge(repo: Repository, pull: Pull, message: str | None = None) -> str | None:
    """Merge head into base in the bare repository; the merge commit, or None on a conflict.

    ``message`` is the whole commit message (the host's default when ``None``)."""
    base, head = branch_sha(repo, pull.base), branch_sha(repo, pull.head)
    if base is None or head is None:
        return None
    tree = git(repo, "merge-tree", "--write-tree", base, head)
    if tree.returncode != 0:
        return None
    if message is None:
        message = f"Merge pull request #{pull.number} from {pull.head}\n\n{pull.title}\n"
    commit = git(repo, "commit-tree", tree.stdout.split()[0], "-p", base, "-p", head, "-m", message)
    sha = commit.stdout.strip()
    if git(repo, "update-ref", f"refs/heads/{pull.base}", sha, base).returncode != 0:
        return None
    return sha


# -- authentication ----------------------------------------------------------------------------


def github_authorised(request: Request) -> bool:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() in ("token", "bearer") and hmac.compare_digest(given, TOKEN)


def gitlab_authorised(request: Request) -> bool:
    return hmac.compare_digest(request.headers.get("private-token", ""), TOKEN)


async def read_body(request: Request) -> dict[str, Any]:
    """The JSON body (clients send JSON), merged over the query string (GitLab accepts both)."""
    data: dict[str, Any] = dict(request.query_params)
    raw = await request.body()
    if raw:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            data.update(parsed)
    return data
