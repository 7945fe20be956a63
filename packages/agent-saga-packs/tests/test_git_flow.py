"""Quick exploration; replaced by the real tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_saga import AgentKit, CompensatorRegistry, SagaRolledBack
from agent_saga_packs.git import GitPack

if TYPE_CHECKING:
    from conftest import GitWorld


def test_flow(git_world: GitWorld, tmp_path) -> None:
    kit = AgentKit(home=tmp_path / "h", registry=CompensatorRegistry())
    pack = GitPack(kit, git_world.repo, git_world.gitlab())
    before = git_world.world()
    try:
        with kit.transaction("ship"):
            pack.branch("fix-1", "main")
            pack.commit("fix-1", {"app.py": "VERSION = 2\n"}, "Bump version")
            pack.push("fix-1")
            pr = pack.open_pr("fix-1", "main", "Bump version")
            print(pr)
            merged = pack.merge_pr(pr["number"])
            print(merged, git_world.remote_file("main", "app.py"))
            raise RuntimeError("deploy failed")
    except SagaRolledBack as failed:
        print(failed.report.status, failed.report)
    print(git_world.remote_file("main", "app.py"))
    print(git_world.stand_in.pulls(git_world.name))
    assert git_world.world() == before
    kit.close()


def test_chaos(git_world: GitWorld, saga_kit, saga_chaos) -> None:
    import time

    pack = GitPack(saga_kit, git_world.repo, git_world.github())

    def ship() -> None:
        pack.branch("fix-1", "main")
        pack.commit("fix-1", {"app.py": "VERSION = 2\n"}, "Bump version")
        pack.push("fix-1")
        pr = pack.open_pr("fix-1", "main", "Bump version")
        pack.merge_pr(pr["number"])

    t = time.monotonic()
    report = saga_chaos.run(ship, world=git_world.world, reset=git_world.reset, name="ship")
    print(len(report.results), report.skipped, time.monotonic() - t)
