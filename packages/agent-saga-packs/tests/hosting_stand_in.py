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
import socket

import uvicorn
from stand_in_github import github_merge, github_one, github_pulls
from stand_in_gitlab import gitlab_merge, gitlab_one, gitlab_requests
from stand_in_state import LOCK, REPOS, Repository, read_body
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

# -- the tests' control endpoints --------------------------------------------------------------


async def register(request: Request) -> Response:
    body = await read_body(request)
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
