"""The GitLab API v4 "Merge requests" endpoints of the stand-in, with the documented payloads."""

from __future__ import annotations

from typing import Any

from stand_in_state import (
    LOCK,
    REPOS,
    Pull,
    Repository,
    branch_sha,
    gitlab_authorised,
    merge,
    now,
    read_body,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

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
    body = await read_body(request)
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
    body = await read_body(request)
    with LOCK:
        found = _gitlab_find(request)
        if found is None:
            return gitlab_error(404, "404 Not found")
        repo, pull = found
        if request.method == "PUT":
            event = body.get("state_event")
            if event == "close" and pull.state == "open":
                pull.state, pull.closed_at = "closed", now()
            elif event == "reopen" and pull.state == "closed":
                pull.state, pull.closed_at = "open", None
            for key, attribute in (("title", "title"), ("description", "body")):
                if isinstance(body.get(key), str):
                    setattr(pull, attribute, body[key])
            pull.updated_at = now()
        return JSONResponse(gitlab_request(repo, pull))


async def gitlab_merge(request: Request) -> Response:
    if not gitlab_authorised(request):
        return gitlab_error(401, "401 Unauthorized")
    body = await read_body(request)
    with LOCK:
        found = _gitlab_find(request)
        if found is None:
            return gitlab_error(404, "404 Not found")
        repo, pull = found
        if pull.state != "open":
            return gitlab_error(405, "405 Method Not Allowed")
        if body.get("sha") and body["sha"] != branch_sha(repo, pull.head):
            return gitlab_error(409, "SHA does not match HEAD of source branch")
        message = body.get("merge_commit_message") or (
            f"Merge branch '{pull.head}' into '{pull.base}'\n\n{pull.title}\n"
        )
        sha = merge(repo, pull, str(message))
        if sha is None:
            return gitlab_error(406, "Branch cannot be merged")
        pull.state, pull.merge_sha = "merged", sha
        pull.merged_at = pull.updated_at = now()
        return JSONResponse(gitlab_request(repo, pull))
