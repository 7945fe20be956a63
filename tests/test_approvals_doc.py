"""docs/approvals.md as a reader runs it: its Python blocks, its signed-approvals commands (in
order, in a fresh home, the administrator key listed in ``admin_keys`` as the comment says) and
its passkey enrolment commands.

The ``approve`` lines name ``apr-1234``: they are run against a real pending request, whose id
stands in for it. The server-side passkey commands are run here as written; registering and
revoking passkeys themselves is covered with the control plane's tests.
"""

from __future__ import annotations

import re
import shlex
import threading
import time
from pathlib import Path

from agent_saga import IRREVERSIBLE, AgentKit, ApprovalRequest, Approvals
from agent_saga.cli import main
from agent_saga.testing import run_markdown_examples
from click.testing import CliRunner

DOC = Path(__file__).resolve().parents[1] / "docs" / "approvals.md"
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.DOTALL)


def section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"{title}\n")
    body = start + len(title)
    found = re.search(r"^##+ ", text[body:], re.MULTILINE)
    return text[start : body + found.start()] if found else text[start:]


def commands(text: str) -> list[list[str]]:
    """Each ``agent-saga`` line of the section's code blocks, without its comment."""
    lines = [line.strip() for _, body in FENCE.findall(text) for line in body.splitlines()]
    return [shlex.split(line, comments=True) for line in lines if line.startswith("agent-saga ")]


def agent_saga(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, (args, result.output)
    return result.output


def test_the_python_blocks_run(tmp_path: Path) -> None:
    assert run_markdown_examples(DOC) == 3
    assert (tmp_path / "home").is_dir()  # the default durable home, as a reader's would be


def test_the_signed_approval_commands_run_in_order(tmp_path: Path) -> None:
    lines = commands(section("## Signed approvals (Ed25519): the set-up for money"))
    assert [words[1:3] for words in lines] == [
        ["keys", "new"], ["keys", "new"], ["keys", "add"], ["approve", "apr-1234"],
        ["keys", "new"], ["keys", "add"], ["keys", "revoke"], ["keys", "list"],
    ]  # fmt: skip
    config = tmp_path / "agent-saga.toml"  # the working directory's
    AgentKit().close()  # the agents' home exists (keys are records of its log)
    kit: AgentKit | None = None
    waiter: threading.Thread | None = None
    try:
        for words in lines:
            if words[1:3] == ["keys", "add"] and kit is None:
                config.write_text(f'admin_keys = ["{tmp_path / "admin.key.pub"}"]\n')
            if words[1] == "approve":
                kit, waiter, request_id = _a_pending_request()
                words[2] = request_id
            if words[1:3] == ["keys", "revoke"]:
                listed = agent_saga("keys", "list")
                words[3] = listed.splitlines()[0].split()[-1]  # alice's first key, as listed
            agent_saga(*words[1:])
            if words[1] == "approve":
                assert waiter is not None
                waiter.join(20)
        listed = agent_saga("keys", "list")
        assert [line.split()[:2] for line in listed.splitlines()] == [
            ["alice", "REVOKED"], ["alice", "active"]
        ]  # fmt: skip
    finally:
        if kit is not None:
            kit.close()
    listed_saga = agent_saga("sagas").splitlines()[1]  # the wire ran, on alice's signature
    assert listed_saga.split()[1:3] == ["committed", "1"]
    assert listed_saga.endswith("payout")


class _Posted:
    """An approval channel that keeps the ids of the requests posted to it."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def request_posted(self, request: ApprovalRequest) -> None:
        self.ids.append(request.id)

    def request_decided(self, request: ApprovalRequest, decision: object) -> None:
        pass


def _a_pending_request() -> tuple[AgentKit, threading.Thread, str]:
    """A kit whose IRREVERSIBLE step waits for alice's signed vote, the thread it waits in, and
    the request's id."""
    posted = _Posted()
    approvals = Approvals(approvers=["alice"], require_signature=True, channels=[posted])
    kit = AgentKit(approvals=approvals)

    @kit.tool(name="bank.wire", semantics=IRREVERSIBLE)
    def wire(amount: int) -> int:
        return amount

    def pay() -> None:
        with kit.transaction("payout"):
            wire(9000)

    waiter = threading.Thread(target=pay)
    waiter.start()
    deadline = time.monotonic() + 20
    while not posted.ids:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return kit, waiter, posted.ids[0]


def test_the_passkey_enrolment_commands_run() -> None:
    lines = commands(section("### Registering a passkey on the control plane"))
    assert [words[1:4] for words in lines] == [["cloud-server", "passkeys", "enrol"]] * 2
    for words in lines:
        code = agent_saga(*words[1:]).splitlines()[0]
        assert re.fullmatch(r"ase_[0-9a-f]{16}_[A-Za-z0-9_-]{43}", code)
