"""The git pack's tools: branch, commit, push, open a pull request, merge; and their undoing.

Every tool is COMPENSABLE: even a local branch or commit lives in a repository on disk that
outlives the process, so it is undone by a named compensation that recovery can run, and each
has a probe. Compensations run newest first: the merge is reverted on the target branch, the
pull request closed, the pushed branch deleted on the remote (or put back where it was), the
commit taken off the local branch, the local branch deleted. Each compensation moves a ref
only from where the step left it (compare-and-swap); if someone moved it since, the
compensation raises and the saga waits for a human rather than overwrite their work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from agent_saga import COMPENSABLE, DenyValues, Rule

from .._declare import Declarer
from .._saga_mark import saga_mark
from ._hosting import Hosting, HostingError
from ._repo import TRAILER, GitError, LocalRepository, key_digest

if TYPE_CHECKING:
    from agent_saga import AgentKit

BRANCH_TOOLS = ("branch", "commit", "push")


def marker(idempotency_key: str) -> str:
    """The line a pull request's body carries so a retry or a probe can find it."""
    return f"<!-- agent-saga:{key_digest(idempotency_key)} -->"


class GitPack:
    """The git tools on ``repository`` and, for pull requests, ``hosting``.

    Declared on ``kit`` (or process-wide when ``kit`` is ``None``), named under ``prefix``:
    ``branch(branch, start="HEAD")``, ``commit(branch, files, message)``, ``push(branch)``,
    ``open_pr(head, base, title, body="")`` and ``merge_pr(number, head_sha=None)``, which
    merges only while the pull request's head is at ``head_sha`` or, by default, at the tip of
    the clone's branch of the same name: what is merged is what the saga pushed, never a
    commit someone added to the branch since.
    """

    def __init__(
        self,
        kit: AgentKit | None,
        repository: LocalRepository,
        hosting: Hosting | None = None,
        *,
        prefix: str = "git",
    ) -> None:
        self.repo = repository
        self.hosting = hosting
        declare = Declarer(kit, prefix)
        self.tool_names = {
            a: declare.name(a) for a in ("branch", "commit", "push", "open_pr", "merge_pr")
        }
        for action, undo in (
            ("delete_branch", self._delete_branch),
            ("reset_branch", self._reset_branch),
            ("restore_remote_branch", self._restore_remote_branch),
            ("close_pr", self._close_pr),
            ("revert_merge", self._revert_merge),
        ):
            declare.compensator(action, undo)
        tool = declare.tool
        self.branch: Callable[..., dict[str, Any]] = tool(
            self._branch, "branch", COMPENSABLE, compensate="delete_branch",
            probe=self._branch_landed,
        )  # fmt: skip
        self.commit: Callable[..., dict[str, Any]] = tool(
            self._commit, "commit", COMPENSABLE, compensate="reset_branch",
            probe=self._commit_landed,
        )  # fmt: skip
        self.push: Callable[..., dict[str, Any]] = tool(
            self._push, "push", COMPENSABLE, compensate="restore_remote_branch",
            probe=self._push_landed,
        )  # fmt: skip
        self.open_pr: Callable[..., dict[str, Any]] = tool(
            self._open_pr, "open_pr", COMPENSABLE, compensate="close_pr", probe=self._pr_landed
        )
        self.merge_pr: Callable[..., dict[str, Any]] = tool(
            self._merge_pr, "merge_pr", COMPENSABLE, compensate="revert_merge",
            probe=self._merge_landed,
        )  # fmt: skip

    # -- probes anyone may ask -----------------------------------------------------------------

    def pr_is_open(self, number: int) -> bool:
        """Is pull request ``number`` open (neither closed nor merged)?"""
        return bool(self._host().get(number)["state"] == "open")

    def merge_is_on_branch(self, merge_sha: str, branch: str) -> bool:
        """Is commit ``merge_sha`` on the remote's ``branch`` (asked of the remote)?"""
        tip = self.repo.fetch(branch)
        return tip is not None and self.repo.is_ancestor(merge_sha, tip)

    def _host(self) -> Hosting:
        if self.hosting is None:
            raise HostingError("git pack: no hosting configured for pull requests")
        return self.hosting

    # -- branch --------------------------------------------------------------------------------

    def _branch(self, branch: str, start: str = "HEAD", *, idempotency_key: str) -> dict[str, Any]:
        """Create local branch ``branch`` at ``start``."""
        earlier = self.repo.branch_created_by(branch, idempotency_key)
        if earlier is not None:
            return {"branch": branch, "sha": earlier}
        sha = self.repo.rev(start)
        if sha is None:
            raise GitError(f"branch: {start!r} names no commit")
        if self.repo.rev(f"refs/heads/{branch}") is not None:
            raise GitError(f"branch: {branch!r} already exists")
        self.repo.create_branch(branch, sha, idempotency_key, saga_mark())
        return {"branch": branch, "sha": sha}

    def _branch_landed(self, branch: str, idempotency_key: str) -> dict[str, Any] | bool:
        sha = self.repo.branch_created_by(branch, idempotency_key)
        return False if sha is None else {"branch": branch, "sha": sha}

    def _delete_branch(self, result: Mapping[str, Any], idempotency_key: str) -> None:
        branch, created_at = str(result["branch"]), str(result["sha"])
        now = self.repo.rev(f"refs/heads/{branch}")
        if now is None:
            return
        # It may carry commits of this saga whose own undo failed; those go with it. A commit
        # of anyone else, another saga's included, keeps it in place.
        saga = self.repo.branch_saga(branch)
        if now != created_at and (
            saga is None or not self.repo.only_commits_of_saga(created_at, now, saga)
        ):
            raise GitError(
                f"delete branch {branch}: it moved to {now[:12]} since it was created at "
                f"{created_at[:12]}, not only by this saga; left in place"
            )
        if self.repo.checked_out() == branch:
            raise GitError(f"delete branch {branch}: it is checked out in {self.repo.workdir}")
        self.repo.move_branch(branch, None, now, idempotency_key)

    # -- commit --------------------------------------------------------------------------------

    def _commit(
        self, branch: str, files: Mapping[str, str | None], message: str, *, idempotency_key: str
    ) -> dict[str, Any]:
        """Commit ``files`` (path -> text; ``None`` removes the path) on local ``branch``."""
        found = self.repo.find_commit(branch, idempotency_key)
        if found is None:
            found = self.repo.commit_files(branch, files, message, idempotency_key, saga_mark())
        sha, parent = found
        return {"branch": branch, "sha": sha, "parent": parent}

    def _commit_landed(self, branch: str, idempotency_key: str) -> dict[str, Any] | bool:
        found = self.repo.find_commit(branch, idempotency_key)
        return False if found is None else {"branch": branch, "sha": found[0], "parent": found[1]}

    def _reset_branch(self, result: Mapping[str, Any], idempotency_key: str) -> None:
        branch, sha, parent = str(result["branch"]), str(result["sha"]), str(result["parent"])
        now = self.repo.rev(f"refs/heads/{branch}")
        if now is None or now == parent:
            return
        if now != sha:
            raise GitError(
                f"undo commit {sha[:12]} on {branch}: the branch moved to {now[:12]}; left in place"
            )
        self.repo.move_branch(branch, parent, sha, idempotency_key)

    # -- push ----------------------------------------------------------------------------------

    def _push(self, branch: str, *, idempotency_key: str) -> dict[str, Any]:
        """Push local ``branch`` to the remote (never overwriting a branch that moved)."""
        sha = self.repo.rev(f"refs/heads/{branch}")
        if sha is None:
            raise GitError(f"push: no local branch {branch!r}")
        remote = self.repo.remote_sha(branch)
        pushed = self.repo.read_note(idempotency_key, "after")
        if pushed is not None and remote == pushed:  # this call already pushed
            previous = self.repo.read_note(idempotency_key, "before")
            return {"branch": branch, "sha": pushed, "previous": previous}
        if remote == sha:  # nothing to push: no effect, nothing to undo
            return {"branch": branch, "sha": sha, "previous": sha}
        if remote is not None:
            self.repo.write_note(idempotency_key, "before", remote)
        self.repo.write_note(idempotency_key, "after", sha)  # durable before the push
        self.repo.push(branch, sha, remote)
        return {"branch": branch, "sha": sha, "previous": remote}

    def _push_landed(self, branch: str, idempotency_key: str) -> dict[str, Any] | bool:
        pushed = self.repo.read_note(idempotency_key, "after")
        if pushed is None or self.repo.remote_sha(branch) != pushed:
            return False
        previous = self.repo.read_note(idempotency_key, "before")
        return {"branch": branch, "sha": pushed, "previous": previous}

    def _restore_remote_branch(self, result: Mapping[str, Any], idempotency_key: str) -> None:
        branch, sha = str(result["branch"]), str(result["sha"])
        previous = result.get("previous")
        remote = self.repo.remote_sha(branch)
        if remote == previous:
            self.repo.drop_notes(idempotency_key)
            return
        if remote != sha:
            raise GitError(
                f"undo push of {branch}: the remote branch is at "
                f"{remote[:12] if remote else 'nothing'}, not {sha[:12]}; left in place"
            )
        self.repo.push(branch, None if previous is None else str(previous), sha)
        self.repo.drop_notes(idempotency_key)

    # -- pull requests -------------------------------------------------------------------------

    def _open_pr(
        self, head: str, base: str, title: str, body: str = "", *, idempotency_key: str
    ) -> dict[str, Any]:
        """Open a pull request from ``head`` into ``base``."""
        host, mark = self._host(), marker(idempotency_key)
        found = host.find(head, mark)
        if found is None:
            found = host.open(head, base, title, f"{body}\n\n{mark}".lstrip())
        return _summary(found)

    def _pr_landed(self, head: str, idempotency_key: str) -> dict[str, Any] | bool:
        found = self._host().find(head, marker(idempotency_key))
        return False if found is None else _summary(found)

    def _close_pr(self, result: Mapping[str, Any]) -> None:
        host, number = self._host(), int(result["number"])
        if host.get(number)["state"] == "open":
            host.close(number)

    def _merge_pr(
        self, number: int, head_sha: str | None = None, *, idempotency_key: str
    ) -> dict[str, Any]:
        """Merge pull request ``number`` with a merge commit whose message carries the step's
        key, only while the pull request's head is at ``head_sha``; by default, at the tip of
        the clone's branch of the same name (what the saga committed and pushed from here).

        A pull request merged by anyone else, or whose head moved, is refused: the
        compensation reverts only a merge that carries this step's key."""
        host = self._host()
        pull = host.get(number)
        if pull["state"] == "merged":
            # A retry finds its own merge; anyone else's merge is not this step's effect, and
            # taking it would make the compensation revert their work.
            mine = self._merged_by(pull, idempotency_key)
            if mine:
                return _merge_summary(pull)
            why = "without this step's key" if mine is False else f"not on {pull['base']}"
            raise HostingError(
                f"{host.name}: merge #{number}: it was merged as {str(pull['merge_sha'])[:12]} "
                f"{why}; not taken as this step's merge"
            )
        if pull["state"] == "closed":
            raise HostingError(f"{host.name}: merge #{number}: the pull request is closed")
        expected, whose = head_sha, "the given head_sha"
        if expected is None:
            expected, whose = self.repo.rev(f"refs/heads/{pull['head']}"), "the clone's branch"
            if expected is None:
                raise HostingError(
                    f"{host.name}: merge #{number}: the clone has no branch {pull['head']!r} "
                    "to compare its head with; pass head_sha"
                )
        if pull["head_sha"] != expected:
            raise HostingError(
                f"{host.name}: merge #{number}: its head is at {str(pull['head_sha'])[:12]}, "
                f"not at {expected[:12]} ({whose}); not merged"
            )
        merged = host.merge(number, expected, f"{TRAILER}: {idempotency_key}")
        return _merge_summary(merged)

    def _merged_by(self, pull: Mapping[str, Any], key: str) -> bool | None:
        """Was ``pull`` merged by the step with ``key`` (its merge commit carries the key)?
        ``None``: the merge commit cannot be read (not on the base branch)."""
        merge_sha = pull.get("merge_sha")
        if pull.get("state") != "merged" or not merge_sha:
            return False
        self.repo.fetch(str(pull["base"]))
        return self.repo.carries_key(str(merge_sha), key)

    def _merge_landed(self, number: int, idempotency_key: str) -> dict[str, Any] | bool | None:
        pull = self._host().get(number)
        mine = self._merged_by(pull, idempotency_key)
        return _merge_summary(pull) if mine else mine

    def _revert_merge(self, result: Mapping[str, Any], idempotency_key: str) -> None:
        self.repo.revert_merge(str(result["base"]), str(result["merge_sha"]), idempotency_key)


def _summary(pull: Mapping[str, Any]) -> dict[str, Any]:
    return {key: pull[key] for key in ("number", "url", "head", "base")}


def _merge_summary(pull: Mapping[str, Any]) -> dict[str, Any]:
    return {"number": pull["number"], "base": pull["base"], "merge_sha": pull["merge_sha"]}


def git_rules(
    protected: tuple[str, ...] = ("main", "master"), *, prefix: str = "git"
) -> list[Rule]:
    """No branch, commit or push on a protected branch (``DenyValues``): changes to those
    reach them only through a pull request."""
    tools = [f"{prefix}.{action}" for action in BRANCH_TOOLS]
    return [DenyValues("branch", protected, tools=tools, name="protected_branches")]
