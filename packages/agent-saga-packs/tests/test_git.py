"""The git pack against real git (a bare repository as the remote, a clone) and real PyGithub
and python-gitlab clients talking to the hosting stand-in on 127.0.0.1.

Every check reads the bare repository with git, or the stand-in's own records, never the
pack's bookkeeping.
"""

from __future__ import annotations

import re
import subprocess
from typing import TYPE_CHECKING, Any

import pytest
from agent_saga import AgentKit, CompensatorRegistry, GateRefused, SagaRolledBack, SagaStatus
from agent_saga_packs.git import (
    GitError,
    GitHubHosting,
    GitPack,
    HostingError,
    LocalRepository,
    git_rules,
    marker,
)
from pytest_agent_saga import ChaosRunner

if TYPE_CHECKING:
    from pathlib import Path

    from conftest import GitWorld

HOSTS = ["github", "gitlab"]


def pack_for(world: GitWorld, kit: AgentKit, host: str = "github") -> GitPack:
    hosting = world.github() if host == "github" else world.gitlab()
    return GitPack(kit, world.repo, hosting)


def kit_for(tmp_path: Path, **options: Any) -> AgentKit:
    return AgentKit(home=tmp_path / "agent", registry=CompensatorRegistry(), **options)


def ship(pack: GitPack, *, release: bool = True) -> dict[str, Any]:
    """A coding agent: a fix on a branch, pushed, reviewed as a pull request, merged, released."""
    pack.branch("fix-version", "main")
    pack.commit("fix-version", {"app.py": "VERSION = 2\n", "CHANGES": "2: fixed\n"}, "Bump to 2")
    pack.push("fix-version")
    pull = pack.open_pr("fix-version", "main", "Bump to 2", "Fixes the version.")
    merged = pack.merge_pr(pull["number"])
    if not release:
        raise RuntimeError("release pipeline failed")
    return merged


@pytest.mark.parametrize("host", HOSTS)
def test_a_merged_change_is_on_the_target_branch(
    git_world: GitWorld, tmp_path: Path, host: str
) -> None:
    with kit_for(tmp_path) as kit:
        pack = pack_for(git_world, kit, host)
        with kit.transaction("ship"):
            merged = ship(pack)
        assert pack.merge_is_on_branch(merged["merge_sha"], "main")
        assert not pack.pr_is_open(merged["number"])
    assert git_world.remote_file("main", "app.py") == "VERSION = 2\n"
    assert git_world.remote_branches()["main"] == merged["merge_sha"]
    parents = subprocess.run(
        ["git", "rev-list", "--parents", "-n", "1", merged["merge_sha"]],
        cwd=git_world.bare, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert len(parents) == 3  # a merge commit: main and the branch
    (pull,) = git_world.stand_in.pulls(git_world.name)
    assert (pull["state"], pull["merge_sha"]) == ("merged", merged["merge_sha"])


@pytest.mark.parametrize("host", HOSTS)
def test_a_failure_after_the_merge_undoes_everything_newest_first(
    git_world: GitWorld, tmp_path: Path, host: str
) -> None:
    before = git_world.world()
    with kit_for(tmp_path) as kit:
        pack = pack_for(git_world, kit, host)
        with pytest.raises(SagaRolledBack) as failed, kit.transaction("ship"):
            ship(pack, release=False)
        report = failed.value.report
        undone = [r.data["ordinal"] for r in kit.store.records() if r.kind == "compensation.done"]
    assert report.status is SagaStatus.ROLLED_BACK
    assert [step.tool for step in report.compensated] == [
        "git.merge_pr",
        "git.open_pr",
        "git.push",
        "git.commit",
        "git.branch",
    ]
    assert undone == [5, 4, 3, 2, 1]
    # The target branch has its files back, through a revert commit on top of the merge.
    assert git_world.remote_file("main", "app.py") == "VERSION = 1\n"
    assert git_world.remote_file("main", "CHANGES") is None
    log = subprocess.run(
        ["git", "log", "--format=%s", "-n", "2", "main"],
        cwd=git_world.bare, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert log[0].startswith('Revert "Merge ')
    # The branch is gone on the remote and in the clone; the pull request stays merged.
    assert set(git_world.remote_branches()) == {"main"}
    assert set(git_world.repo.branches()) == {"main"}
    assert [p["state"] for p in git_world.stand_in.pulls(git_world.name)] == ["merged"]
    assert git_world.world() == before


@pytest.mark.parametrize("host", HOSTS)
def test_a_failure_before_the_merge_closes_the_pull_request(
    git_world: GitWorld, tmp_path: Path, host: str
) -> None:
    with kit_for(tmp_path) as kit:
        pack = pack_for(git_world, kit, host)
        with pytest.raises(SagaRolledBack), kit.transaction("ship"):
            pack.branch("fix-version", "main")
            pack.commit("fix-version", {"app.py": "VERSION = 2\n"}, "Bump to 2")
            pack.push("fix-version")
            pull = pack.open_pr("fix-version", "main", "Bump to 2")
            assert pack.pr_is_open(pull["number"])
            raise RuntimeError("CI failed")
        assert not pack.pr_is_open(pull["number"])
    assert [p["state"] for p in git_world.stand_in.pulls(git_world.name)] == ["closed"]
    assert set(git_world.remote_branches()) == {"main"}
    assert git_world.remote_branches()["main"] == git_world.initial


def test_a_push_to_an_existing_branch_is_put_back_not_deleted(
    git_world: GitWorld, tmp_path: Path
) -> None:
    repo = git_world.repo
    with kit_for(tmp_path) as kit:
        pack = GitPack(kit, repo)
        with kit.transaction("prepare"):
            pack.branch("feature", "main")
            pack.commit("feature", {"a.txt": "one\n"}, "One")
            pack.push("feature")
        published = git_world.remote_branches()["feature"]
        with pytest.raises(SagaRolledBack), kit.transaction("more"):
            pack.commit("feature", {"a.txt": "two\n"}, "Two")
            pack.push("feature")
            assert git_world.remote_file("feature", "a.txt") == "two\n"
            raise RuntimeError("stop")
    assert git_world.remote_branches()["feature"] == published
    assert repo.branches()["feature"] == published


def test_a_commit_writes_and_removes_files_without_touching_the_work_tree(
    git_world: GitWorld, tmp_path: Path
) -> None:
    repo = git_world.repo
    with kit_for(tmp_path) as kit:
        pack = GitPack(kit, repo)
        with kit.transaction("tidy"):
            pack.branch("tidy", "main")
            done = pack.commit("tidy", {"app.py": None, "src/app.py": "VERSION = 1\n"}, "Move")
            pack.push("tidy")
    assert git_world.remote_file("tidy", "app.py") is None
    assert git_world.remote_file("tidy", "src/app.py") == "VERSION = 1\n"
    assert (git_world.clone / "app.py").read_text() == "VERSION = 1\n"  # untouched
    assert not (git_world.clone / "src").exists()
    message = repo.run("log", "-1", "--format=%B", done["sha"]).stdout
    assert message.startswith("Move\n\nAgent-Saga-Key: as1-")


def test_an_undo_never_overwrites_work_someone_else_pushed(
    git_world: GitWorld, tmp_path: Path
) -> None:
    with kit_for(tmp_path) as kit:
        pack = GitPack(kit, git_world.repo)
        with pytest.raises(SagaRolledBack) as failed, kit.transaction("ship"):
            pack.branch("feature", "main")
            pack.commit("feature", {"a.txt": "agent\n"}, "Agent's change")
            pack.push("feature")
            # A colleague pushes on top of the agent's commit meanwhile.
            other = git_world.clone.parent / "colleague"
            subprocess.run(["git", "clone", "-q", "-b", "feature", str(git_world.bare), str(other)],
                           check=True)  # fmt: skip
            (other / "b.txt").write_text("colleague\n")
            identity = ["-c", "user.name=C", "-c", "user.email=c@127.0.0.1"]
            for args in (
                ["add", "b.txt"],
                [*identity, "commit", "-qm", "Colleague"],
                ["push", "-q", "origin", "feature"],
            ):
                subprocess.run(["git", *args], cwd=other, check=True)
            raise RuntimeError("stop")
    report = failed.value.report
    assert report.status is SagaStatus.NEEDS_HUMAN
    assert "left in place" in str(report.failed[0].error)
    assert git_world.remote_file("feature", "b.txt") == "colleague\n"


def test_retried_calls_with_the_same_key_act_once(git_world: GitWorld, tmp_path: Path) -> None:
    with kit_for(tmp_path) as kit:
        pack = pack_for(git_world, kit)
        with kit.transaction("ship"):
            ship(pack)
        intents = [(r.data["tool"], r.data) for r in kit.store.records() if r.kind == "step.intent"]
    keys = {str(tool): str(data["idempotency_key"]) for tool, data in intents}
    first = git_world.world()
    # Each tool's function, delivered the same call again (an at-least-once queue).
    assert pack._branch("fix-version", "main", idempotency_key=keys["git.branch"])["sha"]
    again = pack._commit("fix-version", {"app.py": "VERSION = 2\n"}, "Bump to 2",
                         idempotency_key=keys["git.commit"])  # fmt: skip
    assert again["sha"] == git_world.repo.branches()["fix-version"]
    pushed = pack._push("fix-version", idempotency_key=keys["git.push"])
    reopened = pack._open_pr(
        "fix-version", "main", "Bump to 2", idempotency_key=keys["git.open_pr"]
    )
    assert reopened["number"] == 1
    again_merged = pack._merge_pr(1, pushed["sha"], idempotency_key=keys["git.merge_pr"])
    assert again_merged["number"] == 1
    assert git_world.world() == first
    assert len(git_world.stand_in.pulls(git_world.name)) == 1


def test_probes_find_each_effect_by_its_key(git_world: GitWorld, tmp_path: Path) -> None:
    with kit_for(tmp_path) as kit:
        pack = pack_for(git_world, kit)
        with kit.transaction("ship"):
            merged = ship(pack)
        keys = {str(r.data["tool"]): str(r.data["idempotency_key"])
                for r in kit.store.records() if r.kind == "step.intent"}  # fmt: skip
    assert pack._branch_landed("fix-version", keys["git.branch"]) == {
        "branch": "fix-version",
        "sha": git_world.initial,
    }
    assert pack._commit_landed("fix-version", keys["git.commit"])["parent"] == git_world.initial  # type: ignore[index]
    assert pack._push_landed("fix-version", keys["git.push"])["previous"] is None  # type: ignore[index]
    assert pack._pr_landed("fix-version", keys["git.open_pr"])["number"] == 1  # type: ignore[index]
    assert pack._merge_landed(1, keys["git.merge_pr"]) == merged
    for probe in (pack._branch_landed, pack._commit_landed, pack._push_landed, pack._pr_landed):
        assert probe("fix-version", "as1-other-key") is False
    assert marker(keys["git.open_pr"]) in git_world.github().get(1)["body"]


def test_protected_branches_are_refused_by_the_gate(git_world: GitWorld, tmp_path: Path) -> None:
    with kit_for(tmp_path, rules=git_rules(("main",))) as kit:
        pack = GitPack(kit, git_world.repo)
        with kit.transaction("direct"):
            with pytest.raises(GateRefused, match="branch='main' is on the deny list"):
                pack.commit("main", {"app.py": "VERSION = 9\n"}, "Straight to main")
            with pytest.raises(GateRefused, match="protected_branches"):
                pack.push("main")
    assert git_world.remote_branches()["main"] == git_world.initial


@pytest.mark.parametrize("path", ["a/.git/config", ".GIT/config", "src/.Git/hooks/post-merge"])
def test_a_path_through_any_git_directory_is_refused_not_dropped(
    git_world: GitWorld, path: str
) -> None:
    repo = git_world.repo
    with pytest.raises(GitError, match=rf"^commit: '{re.escape(path)}' is inside \.git$"):
        repo.commit_files("main", {path: "x", "ok.txt": "y"}, "sneak", "k")
    assert repo.branches()["main"] == git_world.initial


def test_a_branch_another_saga_committed_on_is_left_in_place(
    git_world: GitWorld, tmp_path: Path
) -> None:
    with kit_for(tmp_path) as kit:
        pack = GitPack(kit, git_world.repo)
        with pytest.raises(SagaRolledBack) as failed, kit.transaction("t"):
            pack.branch("shared", "main")
            # Another agent's committed step adds its commit to the new branch meanwhile.
            theirs, _ = git_world.repo.commit_files(
                "shared", {"b.txt": "B"}, "B", "as1-theirs", "f" * 32
            )
            raise RuntimeError("stop")
    assert failed.value.report.status is SagaStatus.NEEDS_HUMAN
    error = str(failed.value.report.failed[0].error)
    assert "delete branch shared: it moved to" in error
    assert "not only by this saga; left in place" in error
    assert git_world.repo.branches()["shared"] == theirs


def test_one_line_errors(git_world: GitWorld, stand_in_url: str) -> None:
    repo = git_world.repo
    with pytest.raises(GitError, match=r"^commit: '\.\./x' is not a relative path"):
        repo.commit_files("main", {"../x": "no"}, "escape", "k")
    with pytest.raises(GitError, match=r"^commit: '\.git/config' is inside \.git"):
        repo.commit_files("main", {".git/config": "no"}, "escape", "k")
    with pytest.raises(GitError, match=r"^commit: 'a\\nb' contains a control character$"):
        repo.commit_files("main", {"a\nb": "no"}, "newline", "k")
    wrong = GitHubHosting(git_world.name, token="wrong", base_url=stand_in_url, retry=None)
    with pytest.raises(HostingError, match=r"^github: read pull request #1: 401 Bad credentials$"):
        wrong.get(1)
    assert "wrong" not in repr(wrong)
    assert "stand-in-token" not in repr(git_world.gitlab())
    with pytest.raises(GitError, match=r"^git rev-parse: .*nowhere is not a directory$"):
        LocalRepository(git_world.clone.parent / "nowhere").git_dir()
    with pytest.raises(GitError, match=r"^git log: no answer within 1e-06 s$"):
        LocalRepository(git_world.clone, timeout=1e-6).run("log")
    missing = git_world.clone.parent / "no-git-here"
    with pytest.raises(GitError, match=r"^git rev-parse: cannot run '.*no-git-here': No such"):
        LocalRepository(git_world.clone, git=str(missing)).git_dir()


def test_every_fault_point_of_shipping_a_change(
    git_world: GitWorld, saga_kit: AgentKit, saga_chaos: ChaosRunner
) -> None:
    pack = pack_for(git_world, saga_kit)
    report = saga_chaos.run(
        lambda: ship(pack), world=git_world.world, reset=git_world.reset, name="ship"
    )
    assert {result.kind for result in report.results} == {
        "exception",
        "compensation",
        "kill",
        "duplicate",
    }
    assert len(report.results) > 50
    assert report.ok


@pytest.mark.parametrize("host", HOSTS)
def test_a_merge_happens_only_at_the_head_the_agent_saw(
    git_world: GitWorld, tmp_path: Path, host: str
) -> None:
    with kit_for(tmp_path) as kit:
        pack = pack_for(git_world, kit, host)
        with kit.transaction("open"):
            pack.branch("fix", "main")
            pack.commit("fix", {"app.py": "VERSION = 3\n"}, "Three")
            pack.push("fix")
            pull = pack.open_pr("fix", "main", "Three")
    hosting = git_world.github() if host == "github" else git_world.gitlab()
    with pytest.raises(HostingError, match=f"^{host}: merge .*: 409 "):
        hosting.merge(pull["number"], "0" * 40, "Agent-Saga-Key: as1-test")
    assert pack.pr_is_open(pull["number"])
    assert git_world.remote_branches()["main"] == git_world.initial


def test_a_branch_someone_checked_out_is_not_deleted(git_world: GitWorld, tmp_path: Path) -> None:
    with kit_for(tmp_path) as kit:
        pack = GitPack(kit, git_world.repo)
        with pytest.raises(SagaRolledBack) as failed, kit.transaction("t"):
            pack.branch("work", "main")
            subprocess.run(["git", "checkout", "-q", "work"], cwd=git_world.clone, check=True)
            raise RuntimeError("stop")
    assert failed.value.report.status is SagaStatus.NEEDS_HUMAN
    assert "it is checked out in" in str(failed.value.report.failed[0].error)
    assert git_world.repo.checked_out() == "work"


def test_a_hooks_git_environment_does_not_send_commands_to_another_repository(
    git_world: GitWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other.git"
    subprocess.run(["git", "init", "-q", "--bare", str(other)], check=True)
    with monkeypatch.context() as hook:  # what git exports to a hook it runs
        hook.setenv("GIT_DIR", str(other))
        hook.setenv("GIT_WORK_TREE", str(tmp_path))
        hook.setenv("GIT_INDEX_FILE", str(tmp_path / "hook-index"))
        with kit_for(tmp_path) as kit:
            pack = GitPack(kit, git_world.repo)
            with kit.transaction("from a hook"):
                pack.branch("feature", "main")
                done = pack.commit("feature", {"a.txt": "one\n"}, "One")
                pack.push("feature")
    refs = subprocess.run(
        ["git", "--git-dir", str(other), "for-each-ref"], capture_output=True, text=True, check=True
    )
    assert refs.stdout == ""
    assert git_world.remote_branches()["feature"] == done["sha"]
    assert git_world.repo.branches()["feature"] == done["sha"]
    assert not (tmp_path / "hook-index").exists()


@pytest.mark.parametrize("host", HOSTS)
def test_a_merge_someone_else_made_is_not_taken_as_the_steps_nor_reverted(
    git_world: GitWorld, tmp_path: Path, host: str
) -> None:
    with kit_for(tmp_path) as kit:
        pack = pack_for(git_world, kit, host)
        with pytest.raises(SagaRolledBack) as failed, kit.transaction("ship"):
            pack.branch("fix", "main")
            pack.commit("fix", {"app.py": "VERSION = 3\n"}, "Three")
            pack.push("fix")
            pull = pack.open_pr("fix", "main", "Three")
            theirs = git_world.merge_as_someone_else(pull["number"])
            pack.merge_pr(pull["number"])
            raise RuntimeError("not reached: the merge is not this step's")
        key = next(str(r.data["idempotency_key"]) for r in kit.store.records()
                   if r.kind == "step.intent" and r.data["tool"] == "git.merge_pr")  # fmt: skip
    report = failed.value.report
    assert "git.merge_pr" not in [step.tool for step in report.compensated]
    assert f"merged as {theirs[:12]} without this step's key" in str(failed.value)
    # The person's merge stays: no revert on main.
    assert git_world.remote_branches()["main"] == theirs
    assert git_world.remote_file("main", "app.py") == "VERSION = 3\n"
    assert pack._merge_landed(pull["number"], key) is False


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("given", [False, True], ids=["clone-branch", "head_sha"])
def test_a_merge_happens_only_at_the_commit_the_saga_pushed(
    git_world: GitWorld, tmp_path: Path, host: str, given: bool
) -> None:
    with kit_for(tmp_path) as kit:
        pack = pack_for(git_world, kit, host)
        with pytest.raises(SagaRolledBack) as failed, kit.transaction("ship"):
            pack.branch("fix", "main")
            pack.commit("fix", {"app.py": "VERSION = 3\n"}, "Three")
            pushed = pack.push("fix")
            pull = pack.open_pr("fix", "main", "Three")
            moved = git_world.push_as_someone_else("fix", "extra.txt", "not reviewed\n")
            if given:
                pack.merge_pr(pull["number"], pushed["sha"])
            else:
                pack.merge_pr(pull["number"])
    whose = "the given head_sha" if given else "the clone's branch"
    assert f"its head is at {moved[:12]}, not at {pushed['sha'][:12]} ({whose})" in str(
        failed.value
    )
    assert git_world.remote_branches()["main"] == git_world.initial
    assert git_world.remote_file("main", "extra.txt") is None
    assert [p["state"] for p in git_world.stand_in.pulls(git_world.name)] == ["closed"]


def test_a_pull_request_from_a_branch_the_clone_lacks_is_not_merged_blind(
    git_world: GitWorld, tmp_path: Path
) -> None:
    git_world.repo.run("push", "--quiet", "origin", "main:refs/heads/theirs")
    git_world.push_as_someone_else("theirs", "theirs.txt", "theirs\n")
    number = git_world.github().open("theirs", "main", "Theirs", "")["number"]
    with kit_for(tmp_path) as kit:
        pack = pack_for(git_world, kit)
        with pytest.raises(SagaRolledBack) as failed, kit.transaction("merge"):
            pack.merge_pr(number)
    assert "the clone has no branch 'theirs' to compare its head with; pass head_sha" in str(
        failed.value
    )
    assert git_world.remote_branches()["main"] == git_world.initial
    assert [p["state"] for p in git_world.stand_in.pulls(git_world.name)] == ["open"]


@pytest.mark.parametrize("host", HOSTS)
def test_the_merge_commit_carries_the_steps_key(
    git_world: GitWorld, tmp_path: Path, host: str
) -> None:
    with kit_for(tmp_path) as kit:
        pack = pack_for(git_world, kit, host)
        with kit.transaction("ship"):
            merged = ship(pack)
        key = next(str(r.data["idempotency_key"]) for r in kit.store.records()
                   if r.kind == "step.intent" and r.data["tool"] == "git.merge_pr")  # fmt: skip
    message = subprocess.run(
        ["git", "log", "-1", "--format=%B", merged["merge_sha"]],
        cwd=git_world.bare, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert f"Agent-Saga-Key: {key}" in message.splitlines()
    assert message.startswith("Merge ")
    assert pack._merge_landed(merged["number"], key) == merged
    assert pack._merge_landed(merged["number"], "as1-another-step") is False
