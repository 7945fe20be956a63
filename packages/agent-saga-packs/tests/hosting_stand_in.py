"""A local stand-in for the GitHub and GitLab REST APIs, for the git pack's tests.

It answers the endpoints the pack's clients (PyGithub, python-gitlab) call, with the payload
shapes the providers document (GitHub REST "Pulls"; GitLab API v4 "Merge requests"), on
127.0.0.1 only. Merges are real: the server merges in the bare repository the tests push to
(``git merge-tree --write-tree`` and ``git commit-tree``), as the host would.

Run as ``python hosting_stand_in.py --fd N`` on a socket the parent bound (no port race); the
token the clients must present is ``$STAND_IN_TOKEN``. ``POST /_stand-in/repos`` registers a
repository (and forgets its pull requests); ``GET /_stand-in/repos/{name}/pulls`` lists them.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

TOKEN = os.environ.get("STAND_IN_TOKEN", "")
GIT_ENV = {
    **os.environ,
    "LC_ALL": "C",
    "GIT_AUTHOR_NAME": "Code Host",
    "GIT_AUTHOR_EMAIL": "host@127.0.0.1",
    "GIT_COMMITTER_NAME": "Code Host",
    "GIT_COMMITTER_EMAIL": "host@127.0.0.1",
}
DOCS = "https://docs.github.com/rest/pulls/pulls"


def _now() -> str:
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
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
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


def merge(repo: Repository, pull: Pull) -> str | None:
    """Merge head into base in the bare repository; the merge commit, or None on a conflict."""
    base, head = branch_sha(repo, pull.base), branch_sha(repo, pull.head)
    if base is None or head is None:
        return None
    tree = git(repo, "merge-tree", "--write-tree", base, head)
    if tree.returncode != 0:
        return None
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


# -- GitHub REST: pulls ------------------------------------------------------------------------


def github_pull(request: Request, repo: Repository, pull: Pull) -> dict[str, Any]:
    api = f"{str(request.base_url).rstrip('/')}/repos/{repo.name}"
    owner = repo.name.split("/")[0]
    user = {"login": owner, "id": 1, "type": "Organization"}
    repo_json = {"id": 1, "name": repo.name.split("/")[1], "full_name": repo.name, "owner": user}

    def side(branch: str) -> dict[str, Any]:
        sha = branch_sha(repo, branch) or ""
        return {"label": f"{owner}:{branch}", "ref": branch, "sha": sha, "user": user,
                "repo": repo_json}  # fmt: skip

    return {
        "url": f"{api}/pulls/{pull.number}",
        "id": 1000 + pull.number,
        "node_id": f"PR_{pull.number}",
        "html_url": f"https://github.com/{repo.name}/pull/{pull.number}",
        "issue_url": f"{api}/issues/{pull.number}",
        "number": pull.number,
        "state": "open" if pull.state == "open" else "closed",
        "locked": False,
        "title": pull.title,
        "user": user,
        "body": pull.body,
        "created_at": pull.created_at,
        "updated_at": pull.updated_at,
        "closed_at": pull.closed_at,
        "merged_at": pull.merged_at,
        "merge_commit_sha": pull.merge_sha,
        "draft": False,
        "head": side(pull.head),
        "base": side(pull.base),
        "merged": pull.state == "merged",
        "mergeable": pull.state == "open",
        "merged_by": user if pull.state == "merged" else None,
        "comments": 0,
        "commits": 1,
    }


def github_error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"message": message, "documentation_url": DOCS, **extra}, status)


async def github_pulls(request: Request) -> Response:
    if not github_authorised(request):
        return github_error(401, "Bad credentials")
    name = f"{request.path_params['owner']}/{request.path_params['name']}"
    with LOCK:
        repo = REPOS.get(name)
        if repo is None:
            return github_error(404, "Not Found")
        if request.method == "GET":
            state = request.query_params.get("state", "open")
            head = request.query_params.get("head", "")
            found = [
                github_pull(request, repo, pull)
                for pull in repo.pulls
                if (state == "all" or (pull.state == "open") == (state == "open"))
                and (not head or f"{repo.name.split('/')[0]}:{pull.head}" == head)
            ]
            return JSONResponse(found)
        created = github_create(request, repo, await _body(request))
        return created if isinstance(created, Response) else JSONResponse(created, 201)


def github_create(request: Request, repo: Repository, body: dict[str, Any]) -> Any:
    head, base = str(body.get("head", "")), str(body.get("base", ""))
    head = head.split(":", 1)[-1]
    for field_name, branch in (("head", head), ("base", base)):
        if branch_sha(repo, branch) is None:
            return github_error(422, "Validation Failed", errors=[
                {"resource": "PullRequest", "field": field_name, "code": "invalid"}])  # fmt: skip
    if any(p.head == head and p.base == base and p.state == "open" for p in repo.pulls):
        owner = repo.name.split("/")[0]
        return github_error(422, "Validation Failed", errors=[
            {"resource": "PullRequest", "code": "custom",
             "message": f"A pull request already exists for {owner}:{head}."}])  # fmt: skip
    pull = Pull(len(repo.pulls) + 1, str(body.get("title", "")), str(body.get("body") or ""),
                head, base)  # fmt: skip
    repo.pulls.append(pull)
    return github_pull(request, repo, pull)


async def github_one(request: Request) -> Response:
    if not github_authorised(request):
        return github_error(401, "Bad credentials")
    body = await _body(request)
    with LOCK:
        found = _find(request)
        if found is None:
            return github_error(404, "Not Found")
        repo, pull = found
        if request.method == "PATCH":
            if body.get("state") == "closed" and pull.state == "open":
                pull.state, pull.closed_at = "closed", _now()
            elif body.get("state") == "open" and pull.state == "closed":
                pull.state, pull.closed_at = "open", None
            for key in ("title", "body"):
                if isinstance(body.get(key), str):
                    setattr(pull, key, body[key])
            pull.updated_at = _now()
        return JSONResponse(github_pull(request, repo, pull))


async def github_merge(request: Request) -> Response:
    if not github_authorised(request):
        return github_error(401, "Bad credentials")
    body = await _body(request)
    with LOCK:
        found = _find(request)
        if found is None:
            return github_error(404, "Not Found")
        repo, pull = found
        if request.method == "GET":  # "check if a pull request has been merged"
            return Response(status_code=204 if pull.state == "merged" else 404)
        if pull.state != "open":
            return github_error(405, "Pull Request is not mergeable")
        if body.get("sha") and body["sha"] != branch_sha(repo, pull.head):
            return github_error(409, "Head branch was modified. Review and try the merge again.")
        sha = merge(repo, pull)
        if sha is None:
            return github_error(405, "Pull Request is not mergeable")
        pull.state, pull.merge_sha = "merged", sha
        pull.merged_at = pull.closed_at = pull.updated_at = _now()
        return JSONResponse(
            {"sha": sha, "merged": True, "message": "Pull Request successfully merged"}
        )


def _find(request: Request) -> tuple[Repository, Pull] | None:
    params = request.path_params
    repo = REPOS.get(f"{params['owner']}/{params['name']}")
    number = int(params["number"])
    if repo is None or not 1 <= number <= len(repo.pulls):
        return None
    return repo, repo.pulls[number - 1]


async def _body(request: Request) -> dict[str, Any]:
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


# -- GitLab API v4: merge requests -------------------------------------------------------------

GITLAB_STATE = {"open": "opened", "closed": "closed", "merged": "merged"}


def gitlab_request(repo: Repository, pull: Pull) -> dict[str, Any]:
    author = {"id": 1, "username": "agent", "name": "Agent", "state": "active"}
    merged = pull.state == "merged"
    return {
        "id": 1000 + pull.number,
        "iid": pull.number,
        "project_id": 1,
        "title": pull.title,
        "description": pull.body,
        "state": GITLAB_STATE[pull.state],
        "created_at": pull.created_at,
        "updated_at": pull.updated_at,
        "merged_by": author if merged else None,
        "merge_user": author if merged else None,
        "merged_at": pull.merged_at,
        "closed_by": author if pull.state == "closed" else None,
        "closed_at": pull.closed_at if pull.state == "closed" else None,
        "target_branch": pull.base,
        "source_branch": pull.head,
        "author": author,
        "source_project_id": 1,
        "target_project_id": 1,
        "draft": False,
        "work_in_progress": False,
        "merge_status": "can_be_merged",
        "detailed_merge_status": "mergeable" if pull.state == "open" else "not_open",
        "sha": branch_sha(repo, pull.head),
        "merge_commit_sha": pull.merge_sha,
        "squash_commit_sha": None,
        "web_url": f"https://gitlab.com/{repo.name}/-/merge_requests/{pull.number}",
        "references": {"short": f"!{pull.number}", "full": f"{repo.name}!{pull.number}"},
    }


def gitlab_error(status: int, message: object) -> JSONResponse:
    return JSONResponse({"message": message}, status)


def _project(request: Request) -> Repository | None:
    return REPOS.get(request.path_params["project"])


async def gitlab_requests(request: Request) -> Response:
    if not gitlab_authorised(request):
        return gitlab_error(401, "401 Unauthorized")
    body = await _body(request)
    with LOCK:
        repo = _project(request)
        if repo is None:
            return gitlab_error(404, "404 Project Not Found")
        if request.method == "GET":
            state = request.query_params.get("state", "all")
            source = request.query_params.get("source_branch")
            return JSONResponse([
                gitlab_request(repo, pull) for pull in repo.pulls
                if (state == "all" or GITLAB_STATE[pull.state] == state)
                and (source is None or pull.head == source)
            ])  # fmt: skip
        head, base = str(body.get("source_branch", "")), str(body.get("target_branch", ""))
        for branch in (head, base):
            if branch_sha(repo, branch) is None:
                return gitlab_error(400, {"base": [f"Branch {branch!r} does not exist"]})
        taken = [p for p in repo.pulls if p.head == head and p.state == "open"]
        if taken:
            return gitlab_error(409, [
                "Another open merge request already exists for this source branch: "
                f"!{taken[0].number}"])  # fmt: skip
        pull = Pull(len(repo.pulls) + 1, str(body.get("title", "")),
                    str(body.get("description") or ""), head, base)  # fmt: skip
        repo.pulls.append(pull)
        return JSONResponse(gitlab_request(repo, pull), 201)


def _gitlab_find(request: Request) -> tuple[Repository, Pull] | None:
    repo = _project(request)
    number = int(request.path_params["iid"])
    if repo is None or not 1 <= number <= len(repo.pulls):
        return None
    return repo, repo.pulls[number - 1]


async def gitlab_one(request: Request) -> Response:
    if not gitlab_authorised(request):
        return gitlab_error(401, "401 Unauthorized")
    body = await _body(request)
    with LOCK:
        found = _gitlab_find(request)
        if found is None:
            return gitlab_error(404, "404 Not found")
        repo, pull = found
        if request.method == "PUT":
            event = body.get("state_event")
            if event == "close" and pull.state == "open":
                pull.state, pull.closed_at = "closed", _now()
            elif event == "reopen" and pull.state == "closed":
                pull.state, pull.closed_at = "open", None
            for key, attribute in (("title", "title"), ("description", "body")):
                if isinstance(body.get(key), str):
                    setattr(pull, attribute, body[key])
            pull.updated_at = _now()
        return JSONResponse(gitlab_request(repo, pull))


async def gitlab_merge(request: Request) -> Response:
    if not gitlab_authorised(request):
        return gitlab_error(401, "401 Unauthorized")
    body = await _body(request)
    with LOCK:
        found = _gitlab_find(request)
        if found is None:
            return gitlab_error(404, "404 Not found")
        repo, pull = found
        if pull.state != "open":
            return gitlab_error(405, "405 Method Not Allowed")
        if body.get("sha") and body["sha"] != branch_sha(repo, pull.head):
            return gitlab_error(409, "SHA does not match HEAD of source branch")
        sha = merge(repo, pull)
        if sha is None:
            return gitlab_error(406, "Branch cannot be merged")
        pull.state, pull.merge_sha = "merged", sha
        pull.merged_at = pull.updated_at = _now()
        return JSONResponse(gitlab_request(repo, pull))


# -- the tests' control endpoints --------------------------------------------------------------


async def register(request: Request) -> Response:
    body = await _body(request)
    with LOCK:
        REPOS[str(body["name"])] = Repository(str(body["name"]), str(body["path"]))
    return JSONResponse({"registered": body["name"]})


async def pulls(request: Request) -> Response:
    with LOCK:
        repo = REPOS.get(request.path_params["name"])
        found = [] if repo is None else [
            {"number": p.number, "title": p.title, "head": p.head, "base": p.base,
             "state": p.state, "merge_sha": p.merge_sha}
            for p in repo.pulls
        ]  # fmt: skip
    return JSONResponse(found)


async def health(request: Request) -> Response:
    return JSONResponse({"ok": True})


GH = "/repos/{owner}/{name}/pulls"
GL = "/api/v4/projects/{project:path}/merge_requests"
app = Starlette(
    routes=[
        Route(GH, github_pulls, methods=["GET", "POST"]),
        Route(GH + "/{number:int}", github_one, methods=["GET", "PATCH"]),
        Route(GH + "/{number:int}/merge", github_merge, methods=["GET", "PUT"]),
        Route(GL, gitlab_requests, methods=["GET", "POST"]),
        Route(GL + "/{iid:int}", gitlab_one, methods=["GET", "PUT"]),
        Route(GL + "/{iid:int}/merge", gitlab_merge, methods=["PUT"]),
        Route("/_stand-in/repos", register, methods=["POST"]),
        Route("/_stand-in/repos/{name:path}/pulls", pulls, methods=["GET"]),
        Route("/_stand-in/health", health, methods=["GET"]),
    ]
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="a listening socket's descriptor")
    options = parser.parse_args()
    listening = socket.socket(fileno=options.fd)  # family and type read from the descriptor
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[listening])


if __name__ == "__main__":
    main()
