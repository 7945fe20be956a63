"""Shared fixtures: an isolated home and no network beyond 127.0.0.1; the real systems the packs
act on, each started once per session as a separate process on 127.0.0.1 (the GitHub/GitLab
stand-in on uvicorn, moto's server); a bare repository as the git remote, per test."""

from __future__ import annotations

import functools
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_saga.testing import loopback_only
from agent_saga_packs.aws import AwsClients
from agent_saga_packs.git import GitHubHosting, GitLabHosting, LocalRepository

HERE = Path(__file__).resolve().parent
TOKEN = "stand-in-token-7c1d"  # the hosting stand-in's only valid token
STARTUP_SECONDS = 30.0


def require(binary: str) -> str:
    """The path of ``binary``; a missing one fails the test (skips only outside CI)."""
    found = shutil.which(binary)
    if found is None:
        message = f"{binary} is not installed"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


GIT_HERMETIC = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
"""No user or system git configuration (a developer's ``commit.gpgsign``, hooks, aliases)."""


def git_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without any ``GIT_*`` variable, and with :data:`GIT_HERMETIC`."""
    kept = {name: value for name, value in base.items() if not name.startswith("GIT_")}
    return {**kept, **GIT_HERMETIC}


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test has its own agent-saga home, fake AWS credentials and no AWS profile, no
    git variable or git configuration of the shell it runs in, and fails on any connection
    beyond 127.0.0.1."""
    for name in [name for name in os.environ if name.startswith("GIT_")]:
        monkeypatch.delenv(name)
    for name, value in GIT_HERMETIC.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AGENT_SAGA_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AGENT_SAGA_STORE", raising=False)
    for name, value in FAKE_AWS.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    with loopback_only() as refused:
        yield
    assert refused == [], f"network access attempted: {refused}"


FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/nonexistent/agent-saga-packs-tests/config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/agent-saga-packs-tests/credentials",
    "AWS_EC2_METADATA_DISABLED": "true",
}


# -- services in their own processes -----------------------------------------------------------


def _get(url: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return json.loads(answer.read() or b"null")


def post_json(url: str, body: object = None) -> Any:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode() if body is not None else b"",
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        raw = answer.read()
    return json.loads(raw) if raw.strip().startswith((b"{", b"[")) else None


def _wait_until_up(process: subprocess.Popen[bytes], probe: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{probe}: the server exited: {log.read_text()[-2000:]}")
        try:
            _get(probe, timeout=0.5)
        except OSError:
            time.sleep(0.05)
        else:
            return
    process.kill()
    raise RuntimeError(f"{probe}: the server did not answer within {STARTUP_SECONDS:.0f} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@dataclass(frozen=True)
class StandIn:
    """The GitHub/GitLab stand-in: its base URL and its control endpoints."""

    url: str

    def register(self, name: str, path: Path) -> None:
        post_json(f"{self.url}/_stand-in/repos", {"name": name, "path": str(path)})

    def pulls(self, name: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = _get(f"{self.url}/_stand-in/repos/{name}/pulls")
        return found


@pytest.fixture(scope="session")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIn]:
    """The hosting stand-in (Starlette on uvicorn) in its own process, on a socket bound here."""
    require("git")
    log = tmp_path_factory.mktemp("stand-in") / "server.log"
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind(("127.0.0.1", 0))
    listening.listen(64)
    port = listening.getsockname()[1]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(HERE / "hosting_stand_in.py"), "--fd", str(listening.fileno())],
            pass_fds=[listening.fileno()],
            env={**git_environment(os.environ), "STAND_IN_TOKEN": TOKEN},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    listening.close()
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(process, f"{url}/_stand-in/health", log)
        yield StandIn(url)
    finally:
        _stop(process)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class Moto:
    """moto's server: its endpoint, and a reset of everything it holds."""

    url: str

    def reset(self) -> None:
        post_json(f"{self.url}/moto-api/reset")


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moto]:
    """``python -m moto.server`` on 127.0.0.1, a separate process, started once."""
    log = tmp_path_factory.mktemp("moto") / "server.log"
    for _attempt in range(3):  # the port is picked free, then bound by moto: retry a lost race
        port = _free_port()
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                env={**os.environ, **FAKE_AWS},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_until_up(process, f"{url}/moto-api/data.json", log)
        except RuntimeError:
            _stop(process)
            continue
        try:
            yield Moto(url)
        finally:
            _stop(process)
        return
    pytest.fail(f"moto's server did not start: {log.read_text()[-2000:]}")


# -- a git remote and a clone ------------------------------------------------------------------

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Agent",
    "GIT_AUTHOR_EMAIL": "agent@127.0.0.1",
    "GIT_COMMITTER_NAME": "Agent",
    "GIT_COMMITTER_EMAIL": "agent@127.0.0.1",
}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        env={**git_environment(os.environ), **GIT_IDENTITY, "LC_ALL": "C"},
    )
    return done.stdout.strip()


KEEP = ("refs/heads/main", "refs/remotes/origin/main")


def trees(where: Path, refs: str = "refs/heads") -> dict[str, str]:
    """Each branch's tree (its files), by name."""
    out = git(where, "for-each-ref", "--format=%(refname:strip=2) %(tree)", refs)
    return dict(line.split(" ") for line in out.splitlines() if line)


@dataclass
class GitWorld:
    """A bare repository (the remote), a clone of it, and the stand-in serving it."""

    name: str
    bare: Path
    clone: Path
    stand_in: StandIn

    @property
    def repo(self) -> LocalRepository:
        return LocalRepository(self.clone)

    def github(self) -> GitHubHosting:
        return GitHubHosting(
            self.name,
            token=TOKEN,
            base_url=self.stand_in.url,
            seconds_between_requests=None,
            seconds_between_writes=None,
            retry=None,
        )

    def gitlab(self) -> GitLabHosting:
        return GitLabHosting(self.name, token=TOKEN, url=self.stand_in.url)

    def merge_as_someone_else(self, number: int) -> str:
        """Merge pull request ``number`` as a person would, in the host's interface (no key in
        the message); the merge commit."""
        from github import Auth, Github

        client = Github(base_url=self.stand_in.url, auth=Auth.Token(TOKEN), retry=None, lazy=True)
        status = client.get_repo(self.name).get_pull(number).merge(merge_method="merge")
        assert status.merged
        return str(status.sha)

    def push_as_someone_else(self, branch: str, path: str, text: str) -> str:
        """A colleague's commit on top of the remote's ``branch``, pushed; its sha."""
        other = self.clone.parent / f"colleague-{branch}"
        if not other.exists():
            git(self.clone.parent, "clone", "--quiet", "-b", branch, str(self.bare), str(other))
        git(other, "pull", "--quiet", "--ff-only", "origin", branch)
        (other / path).write_text(text)
        git(other, "add", path)
        git(other, "commit", "--quiet", "-m", f"Colleague's {path}")
        git(other, "push", "--quiet", "origin", branch)
        return git(other, "rev-parse", "HEAD")

    def remote_branches(self) -> dict[str, str]:
        out = git(self.bare, "for-each-ref", "--format=%(refname:strip=2) %(objectname)")
        return dict(line.split(" ") for line in out.splitlines() if line)

    def remote_file(self, branch: str, path: str) -> str | None:
        done = subprocess.run(
            ["git", "show", f"refs/heads/{branch}:{path}"],
            cwd=self.bare,
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout if done.returncode == 0 else None

    def world(self) -> dict[str, Any]:
        """What an agent changes: the remote's branches and the clone's, by content (a revert
        restores the files, with a new commit), and the open pull requests."""
        remote, local = trees(self.bare), trees(self.clone, "refs/heads")
        pulls = sorted(
            (p["head"], p["base"], p["title"])
            for p in self.stand_in.pulls(self.name)
            if p["state"] == "open"
        )
        return {"remote": remote, "local": local, "open_pulls": pulls}

    def reset(self) -> None:
        """Back to one commit on main, locally and on the remote; no pull requests."""
        for where in (self.bare, self.clone):
            refs = git(where, "for-each-ref", "--format=%(refname)").splitlines()
            script = [f"delete {ref}" for ref in refs if ref not in KEEP]
            script.append(f"update refs/heads/main {self.initial}")
            subprocess.run(["git", "update-ref", "--stdin"], cwd=where, check=True, text=True,
                           input="\n".join(script) + "\n", capture_output=True)  # fmt: skip
        self.stand_in.register(self.name, self.bare)

    @functools.cached_property
    def initial(self) -> str:
        return git(self.clone, "rev-list", "--max-parents=0", "refs/remotes/origin/main")


@pytest.fixture
def git_world(tmp_path: Path, stand_in: StandIn) -> GitWorld:
    bare, clone = tmp_path / "remote.git", tmp_path / "clone"
    git(tmp_path, "init", "--quiet", "--bare", "-b", "main", str(bare))
    git(tmp_path, "clone", "--quiet", str(bare), str(clone))
    for key, value in (("user.name", "Agent"), ("user.email", "agent@127.0.0.1")):
        git(clone, "config", key, value)
    (clone / "README.md").write_text("widgets\n")
    (clone / "app.py").write_text("VERSION = 1\n")
    git(clone, "add", "README.md", "app.py")
    git(clone, "commit", "--quiet", "-m", "Initial commit")
    git(clone, "push", "--quiet", "origin", "main")
    git(clone, "fetch", "--quiet", "origin")
    world = GitWorld("acme/widgets", bare, clone, stand_in)
    stand_in.register(world.name, bare)
    return world


# -- AWS resources of one test, on the session's moto server -----------------------------------

READ_POLICY = "arn:aws:iam::123456789012:policy/artifact-read"


@dataclass
class AwsWorld:
    """The resources of one test, told apart from other tests' by a name prefix (moto's
    server is shared by the session, and resetting it makes its next call slow)."""

    prefix: str
    clients: AwsClients

    def live_instances(self) -> list[str]:
        found = self.clients.ec2.describe_instances(
            Filters=[
                {"Name": "tag:Name", "Values": [f"{self.prefix}*"]},
                {"Name": "instance-state-name", "Values": ["pending", "running", "stopped"]},
            ]
        )
        return sorted(
            tag["Value"]
            for reservation in found["Reservations"]
            for instance in reservation["Instances"]
            for tag in instance.get("Tags", [])
            if tag["Key"] == "Name"
        )

    def buckets(self) -> dict[str, list[str]]:
        s3 = self.clients.s3
        names = [
            b["Name"] for b in s3.list_buckets()["Buckets"] if b["Name"].startswith(self.prefix)
        ]
        return {
            name: sorted(o["Key"] for o in s3.list_objects_v2(Bucket=name).get("Contents", []))
            for name in sorted(names)
        }

    def roles(self) -> dict[str, list[str]]:
        iam = self.clients.iam
        names = [r["RoleName"] for r in iam.list_roles()["Roles"]
                 if r["RoleName"].startswith(self.prefix)]  # fmt: skip
        return {
            name: sorted(
                p["PolicyArn"]
                for p in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]
            )
            for name in sorted(names)
        }

    def world(self) -> dict[str, Any]:
        return {
            "instances": self.live_instances(),
            "buckets": self.buckets(),
            "roles": self.roles(),
        }

    def reset(self) -> None:
        """Remove this test's resources (terminate, empty and delete, detach and delete)."""
        ec2, s3, iam = self.clients.ec2, self.clients.s3, self.clients.iam
        found = ec2.describe_instances(
            Filters=[{"Name": "tag:Name", "Values": [f"{self.prefix}*"]}]
        )
        ids = [i["InstanceId"] for r in found["Reservations"] for i in r["Instances"]]
        if ids:
            ec2.terminate_instances(InstanceIds=ids)
        for bucket, keys in self.buckets().items():
            for key in keys:
                s3.delete_object(Bucket=bucket, Key=key)
            s3.delete_bucket(Bucket=bucket)
        for role, policies in self.roles().items():
            for arn in policies:
                iam.detach_role_policy(RoleName=role, PolicyArn=arn)
            iam.delete_role(RoleName=role)


_worlds = itertools.count(1)


@pytest.fixture
def aws(moto: Moto) -> Iterator[AwsWorld]:
    clients = AwsClients(region="us-east-1", endpoint_url=moto.url)
    try:
        clients.iam.get_policy(PolicyArn=READ_POLICY)
    except clients.iam.exceptions.NoSuchEntityException:
        clients.iam.create_policy(
            PolicyName="artifact-read",
            PolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}],
                }
            ),
        )
    world = AwsWorld(f"t{next(_worlds):03d}-{os.getpid()}-", clients)
    yield world
    world.reset()


@pytest.fixture
def stand_in_url(stand_in: StandIn) -> str:
    return stand_in.url


@pytest.fixture
def stand_in_token() -> str:
    return TOKEN
