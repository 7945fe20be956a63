"""A local clone driven through the ``git`` binary: refs, commits, pushes and reverts.

Every change of a ref is a compare-and-swap (``git update-ref <ref> <new> <old>`` locally,
``--force-with-lease`` on the remote), so nothing is overwritten that moved since it was read.
Commits are built with plumbing (a private index, ``commit-tree``), so the work tree and the
checked-out branch are never touched. Each effect carries the step's idempotency key (a reflog
message, a commit trailer, a bookkeeping ref), which is how a retry recognises its own effect
and how a probe answers "did it land?" after a crash.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

TRAILER = "Agent-Saga-Key"
SAGA_TRAILER = "Agent-Saga-Saga"
"""The commit trailer with the mark of the saga whose step made the commit."""
REFLOG_PREFIX = "agent-saga "
SCAN_DEPTH = 50
"""First-parent commits searched for a step's own commit (retries come right after it)."""
ZERO = "0" * 40
REPOSITORY_LOCATING_VARIABLES = frozenset({
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_CONFIG", "GIT_CONFIG_COUNT",
    "GIT_CONFIG_PARAMETERS", "GIT_DIR", "GIT_GRAFT_FILE", "GIT_IMPLICIT_WORK_TREE",
    "GIT_INDEX_FILE", "GIT_INTERNAL_SUPER_PREFIX", "GIT_NAMESPACE", "GIT_NO_REPLACE_OBJECTS",
    "GIT_OBJECT_DIRECTORY", "GIT_PREFIX", "GIT_REPLACE_REF_BASE", "GIT_SHALLOW_FILE",
    "GIT_WORK_TREE",
})  # fmt: skip
"""What ``git rev-parse --local-env-vars`` lists (and ``GIT_NAMESPACE``): variables that point
git at a repository, an index or a config. Git exports several of them to the hooks it runs;
inherited by the commands here, they would act on that other repository, not the clone."""


class GitError(Exception):
    """A git command failed, or a ref is not where the operation needs it."""


def key_digest(key: str) -> str:
    """A short, ref-safe digest of an idempotency key."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


class LocalRepository:
    """A clone at ``workdir`` whose remote ``remote`` is where branches are pushed.

    Args:
        workdir: the clone (its work tree is never modified, except inside a throwaway
            worktree under its git directory when a merge is reverted).
        remote: the remote's name.
        git: the git executable.
        timeout: seconds any one git command may take.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        *,
        remote: str = "origin",
        git: str = "git",
        timeout: float = 120.0,
    ) -> None:
        self.workdir = Path(workdir)
        self.remote = remote
        self.git = git
        self.timeout = timeout
        self._git_dir: Path | None = None

    # -- running git ---------------------------------------------------------------------------

    def run(
        self,
        *args: str,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``git args`` in the clone; raises :class:`GitError` (one line) when it fails,
        takes longer than ``timeout`` or cannot be started.

        The process environment is passed on without the variables that locate a repository
        (:data:`REPOSITORY_LOCATING_VARIABLES`), so git finds the clone from ``cwd`` alone;
        ``env`` is applied on top (the private index of a commit)."""
        inherited = {
            name: value
            for name, value in os.environ.items()
            if name not in REPOSITORY_LOCATING_VARIABLES
        }
        full_env = {**inherited, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", **(env or {})}
        where = cwd or self.workdir
        if not where.is_dir():
            raise GitError(f"git {args[0]}: {where} is not a directory")
        try:
            done = subprocess.run(
                [self.git, *args],
                cwd=where,
                input=input,
                env=full_env,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]}: no answer within {self.timeout:g} s") from None
        except OSError as failed:  # no such executable, not allowed to run it
            raise GitError(f"git {args[0]}: cannot run {self.git!r}: {failed.strerror}") from None
        if check and done.returncode != 0:
            lines = (done.stderr.strip() or done.stdout.strip() or "failed").splitlines()
            raise GitError(f"git {args[0]}: {lines[-1]}")
        return done

    def rev(self, ref: str) -> str | None:
        """The commit ``ref`` names, or ``None``."""
        done = self.run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
        return done.stdout.strip() or None

    def git_dir(self) -> Path:
        """The clone's git directory (asked once, then remembered)."""
        if self._git_dir is None:
            self._git_dir = Path(self.run("rev-parse", "--absolute-git-dir").stdout.strip())
        return self._git_dir

    def tree(self, ref: str) -> str | None:
        done = self.run("rev-parse", "--verify", "--quiet", f"{ref}^{{tree}}", check=False)
        return done.stdout.strip() or None

    def checked_out(self) -> str | None:
        """The branch the clone's work tree is on, or ``None`` (a detached head)."""
        done = self.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        return done.stdout.strip() or None

    def branches(self) -> dict[str, str]:
        """Local branches and the commit each points at."""
        out = self.run("for-each-ref", "--format=%(refname:strip=2) %(objectname)", "refs/heads")
        return dict(line.split(" ", 1) for line in out.stdout.splitlines() if line)

    # -- local branches ------------------------------------------------------------------------

    def create_branch(self, branch: str, sha: str, key: str, saga: str | None = None) -> None:
        """Create ``refs/heads/<branch>`` at ``sha``; fails if it exists (no overwrite). The
        reflog entry names the step's ``key`` and the saga's mark."""
        message = REFLOG_PREFIX + key + ("" if saga is None else f" saga:{saga}")
        self.run(
            "update-ref", "--create-reflog", "-m", message, f"refs/heads/{branch}", sha, ZERO,
        )  # fmt: skip

    def _creation(self, branch: str) -> tuple[str, list[str]] | None:
        """The branch's oldest reflog entry (its creation): the commit and the words of its
        message."""
        done = self.run("reflog", "show", "--format=%H %gs", f"refs/heads/{branch}", check=False)
        lines = done.stdout.splitlines()
        if done.returncode != 0 or not lines:
            return None
        sha, _, message = lines[-1].partition(" ")
        return sha, message.split(" ")

    def branch_created_by(self, branch: str, key: str) -> str | None:
        """The commit the branch was created at, if the call with ``key`` created it."""
        found = self._creation(branch)
        if found is None or found[1][:2] != [REFLOG_PREFIX.strip(), key]:
            return None
        return found[0]

    def branch_saga(self, branch: str) -> str | None:
        """The mark of the saga whose step created the branch (``None``: none recorded)."""
        found = self._creation(branch)
        words = [] if found is None or found[1][:1] != [REFLOG_PREFIX.strip()] else found[1]
        return next((w.removeprefix("saga:") for w in words if w.startswith("saga:")), None)

    def only_commits_of_saga(self, since: str, tip: str, saga: str) -> bool:
        """Does ``tip`` descend from ``since`` through commits that all carry the trailer
        ``Agent-Saga-Saga: <saga>`` (commits of that saga's steps, nobody else's)?"""
        if not self.is_ancestor(since, tip):
            return False
        done = self.run("log", "--format=%B%x01", f"{since}..{tip}", "--")
        wanted = f"{SAGA_TRAILER}: {saga}"
        bodies = [body for body in done.stdout.split("\x01") if body.strip()]
        return all(wanted in body.splitlines() for body in bodies)

    def move_branch(self, branch: str, new: str | None, expected: str, key: str) -> None:
        """Point the branch at ``new`` (``None``: delete it) only if it is at ``expected``."""
        ref = f"refs/heads/{branch}"
        if new is None:
            self.run("update-ref", "-m", REFLOG_PREFIX + key, "-d", ref, expected)
        else:
            self.run("update-ref", "-m", REFLOG_PREFIX + key, ref, new, expected)

    # -- commits -------------------------------------------------------------------------------

    def find_commit(self, branch: str, key: str) -> tuple[str, str] | None:
        """``(commit, its first parent)`` of the commit carrying ``key`` among the branch's
        last :data:`SCAN_DEPTH` first-parent commits."""
        done = self.run(
            "log", "--first-parent", f"--max-count={SCAN_DEPTH}", "--format=%H %P%x00%B%x01",
            f"refs/heads/{branch}", "--", check=False,
        )  # fmt: skip
        wanted = f"{TRAILER}: {key}"
        for entry in done.stdout.split("\x01"):
            head, _, body = entry.strip("\n").partition("\x00")
            if wanted in body.splitlines():
                sha, _, parents = head.partition(" ")
                return sha, parents.split(" ")[0]
        return None

    def commit_files(
        self,
        branch: str,
        files: Mapping[str, str | None],
        message: str,
        key: str,
        saga: str | None = None,
    ) -> tuple[str, str]:
        """Commit ``files`` (path -> text, ``None`` removes the path) on top of ``branch``.

        Returns ``(commit, parent)``. The branch moves only if it is still at ``parent``; the
        message ends with the trailer ``Agent-Saga-Key: <key>`` (and ``Agent-Saga-Saga:
        <saga>`` when given).
        """
        parent = self.rev(f"refs/heads/{branch}")
        if parent is None:
            raise GitError(f"commit: no branch {branch!r}")
        index = self.git_dir() / f"agent-saga-index-{key_digest(key)}"
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            self.run("read-tree", parent, env=env)
            entries = []
            for path, text in files.items():
                name = _safe_path(path)
                if text is None:
                    entries.append(f"0 {ZERO}\t{name}")  # mode 0 removes the path
                    continue
                blob = self.run("hash-object", "-w", "--stdin", input=text).stdout.strip()
                entries.append(f"100644 {blob}\t{name}")
            self.run("update-index", "--index-info", input="\n".join(entries) + "\n", env=env)
            tree = self.run("write-tree", env=env).stdout.strip()
        finally:
            index.unlink(missing_ok=True)
        trailers = f"{TRAILER}: {key}\n" + ("" if saga is None else f"{SAGA_TRAILER}: {saga}\n")
        full = f"{message.rstrip()}\n\n{trailers}"
        sha = self.run("commit-tree", tree, "-p", parent, input=full).stdout.strip()
        self.move_branch(branch, sha, parent, key)
        return sha, parent

    # -- the remote ----------------------------------------------------------------------------

    def remote_sha(self, branch: str) -> str | None:
        """Where the remote's branch points now (asked of the remote), or ``None``."""
        out = self.run("ls-remote", self.remote, f"refs/heads/{branch}").stdout.split()
        return out[0] if out else None

    def push(self, branch: str, sha: str | None, expected: str | None) -> None:
        """Set the remote's branch to ``sha`` (``None``: delete it) if it is at ``expected``
        (``None``: if it does not exist)."""
        lease = f"--force-with-lease=refs/heads/{branch}:{expected or ''}"
        source = sha or ""
        self.run("push", "--porcelain", "--quiet", lease, self.remote,
                 f"{source}:refs/heads/{branch}")  # fmt: skip

    def fetch(self, branch: str) -> str | None:
        """Fetch the remote's branch into ``refs/remotes/<remote>/<branch>``; its commit."""
        tracking = f"refs/remotes/{self.remote}/{branch}"
        if self.remote_sha(branch) is None:
            return None
        self.run("fetch", "--quiet", "--no-tags", self.remote, f"+refs/heads/{branch}:{tracking}")
        return self.rev(tracking)

    def carries_key(self, commit: str, key: str) -> bool | None:
        """Does ``commit``'s message have the line ``Agent-Saga-Key: <key>``? ``None`` when the
        clone does not have the commit (fetch the branch it is on first)."""
        done = self.run("log", "-1", "--format=%B", f"{commit}^{{commit}}", "--", check=False)
        if done.returncode != 0:
            return None
        return f"{TRAILER}: {key}" in done.stdout.splitlines()

    def is_ancestor(self, commit: str, of: str) -> bool:
        return self.run("merge-base", "--is-ancestor", commit, of, check=False).returncode == 0

    # -- bookkeeping refs (what a push replaced) -----------------------------------------------

    def note_ref(self, key: str, name: str) -> str:
        return f"refs/agent-saga/{key_digest(key)}/{name}"

    def write_note(self, key: str, name: str, sha: str) -> None:
        self.run("update-ref", self.note_ref(key, name), sha)

    def read_note(self, key: str, name: str) -> str | None:
        return self.rev(self.note_ref(key, name))

    def drop_notes(self, key: str) -> None:
        for name in ("before", "after"):
            self.run("update-ref", "-d", self.note_ref(key, name), check=False)

    # -- reverting a merge ---------------------------------------------------------------------

    def find_revert(self, branch_tip: str, since: str, key: str) -> str | None:
        """The commit after ``since`` up to ``branch_tip`` that carries ``key``, if any."""
        done = self.run("log", "--format=%H%x00%B%x01", f"{since}..{branch_tip}", "--")
        wanted = f"{TRAILER}: {key}"
        for entry in done.stdout.split("\x01"):
            sha, _, body = entry.strip("\n").partition("\x00")
            if wanted in body.splitlines():
                return sha
        return None

    def revert_merge(self, base: str, merge: str, key: str) -> str | None:
        """Revert merge commit ``merge`` on the remote's ``base`` with ``git revert -m 1``.

        Idempotent: returns the revert commit (an earlier one carrying ``key`` if there is
        one), or ``None`` when ``merge`` is not on ``base`` (nothing to revert). The push is a
        fast-forward guarded by a lease: if ``base`` moved meanwhile, it raises.
        """
        tip = self.fetch(base)
        if tip is None or not self.is_ancestor(merge, tip):
            return None
        done = self.find_revert(tip, merge, key)
        if done is not None:
            return done
        place = self.git_dir() / "agent-saga-worktrees" / key_digest(key)
        if place.exists():
            self.run("worktree", "remove", "--force", str(place), check=False)
            shutil.rmtree(place, ignore_errors=True)
        self.run("worktree", "add", "--detach", "--quiet", str(place), tip)
        try:
            self.run("revert", "--no-commit", "-m", "1", merge, cwd=place)
            subject = self.run("log", "-1", "--format=%s", merge).stdout.strip()
            message = f'Revert "{subject}"\n\nThis reverts commit {merge}.\n\n{TRAILER}: {key}\n'
            self.run("commit", "--quiet", "--no-verify", "-F", "-", input=message, cwd=place)
            sha = self.run("rev-parse", "HEAD", cwd=place).stdout.strip()
        finally:
            self.run("worktree", "remove", "--force", str(place), check=False)
            shutil.rmtree(place, ignore_errors=True)
        self.push(base, sha, tip)
        return sha


def _safe_path(path: str) -> str:
    """A repository-relative path, refused when it could leave the tree or names a ``.git``
    directory at any depth, in any case."""
    pure = PurePosixPath(path)
    if any(ord(char) < 32 for char in path):
        raise GitError(f"commit: {path!r} contains a control character")
    if not path or pure.is_absolute() or ".." in pure.parts or "\\" in path:
        raise GitError(f"commit: {path!r} is not a relative path inside the repository")
    if any(part.casefold().rstrip(". ") == ".git" for part in pure.parts):
        # git ignores such a path ("Ignoring path"): the commit would leave it out silently.
        raise GitError(f"commit: {path!r} is inside .git")
    return pure.as_posix()
