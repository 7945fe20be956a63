"""The GitHub REST "Pulls" endpoints of the stand-in, with GitHub's documented payloads."""

from __future__ import annotations

from typing import Any

from stand_in_state import (
    LOCK,
    REPOS,
    Pull,
    Repository,
    branch_sha,
    github_authorised,
    merge,
    now,
    read_body,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

DOCS = "https://docs.github.com/rest/pulls/pulls"

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
        created = github_create(request, repo, await read_body(request))
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
    body = await read_body(request)
    with LOCK:
        found = _find(request)
        if found is None:
            return github_error(404, "Not Found")
        repo, pull = found
        if request.method == "PATCH":
            if body.get("state") == "closed" and pull.state == "open":
                pull.state, pull.closed_at = "closed", now()
            elif body.get("state") == "open" and pull.state == "closed":
                pull.state, pull.closed_at = "open", None
            for key in ("title", "body"):
                if isinstance(body.get(key), str):
                    setattr(pull, key, body[key])
            pull.updated_at = now()
        return JSONResponse(github_pull(request, repo, pull))


async def github_merge(request: Request) -> Response:
    if not github_authorised(request):
        return github_error(401, "Bad credentials")
    body = await read_body(request)
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
        # GitHub's commit_title replaces the first line, commit_message the lines after it.
        owner = repo.name.split("/")[0]
        title = (
            body.get("commit_title")
            or f"Merge pull request #{pull.number} from {owner}/{pull.head}"
        )
        detail = body.get("commit_message")
        sha = merge(repo, pull, f"{title}\n\n{pull.title if detail is None else detail}\n")
        if sha is None:
            return github_error(405, "Pull Request is not mergeable")
        pull.state, pull.merge_sha = "merged", sha
        pull.merged_at = pull.closed_at = pull.updated_at = now()
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
