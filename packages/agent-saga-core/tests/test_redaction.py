"""Redaction: secrets never reach the log, and a stored value can be masked later (by an
administrator) while the log, its checkpoints and disclosure bundles still verify."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    AgentKit,
    Allow,
    ArgumentsRefused,
    ConfigurationError,
    LogError,
    SagaRolledBack,
    SequentialIds,
    ToolCall,
    compensator,
    redact_path,
    tool,
)
from agent_saga.cli import main
from agent_saga.proofs._audit import prove
from agent_saga.proofs._disclosure import DisclosureError, verify_bundle
from agent_saga.proofs._signing import home_verifier
from click.testing import CliRunner, Result

SEEN: list[dict[str, Any]] = []
CVV, CARD = "731", "4111111111111111"
QUOTED_CVV = b'"731"'  # as it would appear in a record (hex hashes contain any digits)


@compensator("redaction.refund")
def refund(result: str) -> None:
    return None


@tool(compensate="redaction.refund", redact=["card.cvv", "items.*.cvv"])
def pay(card: dict[str, str], items: list[dict[str, str]], cents: int) -> str:
    SEEN.append({"card": card, "items": items})
    return "paid"


@tool(name="redaction.charge", compensate="redaction.refund")
def charge(card: dict[str, str], cents: int) -> str:
    return f"ch_{cents}"


class Looks:
    """A gate rule that records what it was shown."""

    name = "looks"

    def __init__(self) -> None:
        self.shown: list[Any] = []

    def evaluate(self, call: ToolCall) -> Allow:
        self.shown.append(call.arg("card.cvv"))
        return Allow()


def verify(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), "verify", *args])


def log_bytes(home: Path) -> bytes:
    return (home / "log.jsonl").read_bytes()


def test_redacted_arguments_never_reach_the_log(home: Path) -> None:
    rule = Looks()
    SEEN.clear()
    with AgentKit(home=home, ids=SequentialIds(), rules=[rule]) as kit, kit.transaction("buy"):
        pay({"number": CARD, "cvv": CVV}, [{"sku": "a", "cvv": "111"}, {"cvv": "222"}], 500)
    assert SEEN == [
        {
            "card": {"number": CARD, "cvv": CVV},
            "items": [{"sku": "a", "cvv": "111"}, {"cvv": "222"}],
        }
    ]
    assert rule.shown == [CVV]  # the gate judged the real value
    raw = log_bytes(home)
    for secret in (QUOTED_CVV, b'"111"', b'"222"'):
        assert secret not in raw
    assert f'"{CARD}"'.encode() in raw  # only the listed paths are masked
    assert raw.count(b'{"$redacted":"write"}') == 3
    assert verify(home).exit_code == 0


def test_a_refused_call_with_bad_arguments_is_not_logged_in_plaintext(home: Path) -> None:
    with (
        AgentKit(home=home) as kit,
        pytest.raises(SagaRolledBack) as caught,
        kit.transaction("buy"),
    ):
        pay({"cvv": CVV}, [], 1, 2)  # type: ignore[call-arg]
    assert isinstance(caught.value.__cause__, ArgumentsRefused)
    assert QUOTED_CVV not in log_bytes(home)


@pytest.mark.parametrize(
    ("paths", "message"),
    [(["crad.cvv"], "names no parameter"), (["card..cvv"], "empty segment"), ("card.cvv", "list")],
)
def test_bad_redaction_paths_are_configuration_errors(paths: Any, message: str) -> None:
    def f(card: dict[str, str]) -> None:
        return None

    with pytest.raises(ConfigurationError, match=message):
        tool(f, semantics="reversible", redact=paths)


@pytest.fixture
def plaintext_home(home: Path) -> Path:
    """A log written without redaction: the CVV is on disk, and a checkpoint covers it."""
    with AgentKit(home=home, ids=SequentialIds()) as kit:
        for cents in (100, 200):
            with kit.transaction("buy"):
                charge({"number": CARD, "cvv": CVV}, cents)
    assert QUOTED_CVV in log_bytes(home)
    return home


def test_masking_a_stored_value_keeps_the_log_and_its_checkpoints_valid(
    plaintext_home: Path, tmp_path: Path, admin_key: Path
) -> None:
    home = plaintext_home
    saved = tmp_path / "saved.note"
    shutil.copy(home / "checkpoints" / "latest.note", saved)
    report = redact_path(
        home, "args.card.cvv", admin_key=admin_key, reason="PCI: CVVs must not be stored"
    )
    assert sorted(report.masked.values()) == [["args.card.cvv"], ["args.card.cvv"]]
    raw = log_bytes(home)
    assert QUOTED_CVV not in raw
    assert raw.count(b'{"$redacted":"') == 2  # each carries the value's salted commitment
    result = verify(home, "--since", str(saved))
    assert result.exit_code == 0, result.output
    assert "consistent with" in result.output
    assert result.output.count("masked after it was written") == 2
    # The store opens on the masked log and keeps appending to the same chain.
    with AgentKit(home=home) as kit, kit.transaction("buy"):
        charge({"number": CARD, "cvv": "000"}, 300)
    assert verify(home, "--since", str(saved)).exit_code == 0
    certified = CliRunner().invoke(main, ["--home", str(home), "certify"])
    assert certified.exit_code == 0
    assert certified.output.count("masked after it was written") == 2  # as warnings


def test_masking_twice_still_verifies_and_a_second_path_is_recorded(
    plaintext_home: Path, admin_key: Path
) -> None:
    redact_path(plaintext_home, "args.card.cvv", admin_key=admin_key)
    second = redact_path(plaintext_home, "args.card.number", admin_key=admin_key, seqs=[2])
    assert list(second.masked) == [2]
    assert verify(plaintext_home).exit_code == 0
    again = redact_path(plaintext_home, "args.card.cvv", admin_key=admin_key)
    assert again.masked == {}  # nothing left to mask


def test_changing_a_masked_record_afterwards_is_caught(
    plaintext_home: Path, admin_key: Path
) -> None:
    redact_path(plaintext_home, "args.card.cvv", admin_key=admin_key)
    log = plaintext_home / "log.jsonl"
    log.write_bytes(log.read_bytes().replace(b'"cents":100', b'"cents":1', 1))
    result = verify(plaintext_home)
    assert result.exit_code == 1
    assert "hash does not match" in result.output  # the unmasked values are still hashed


def test_a_marker_slipped_into_a_record_without_a_redaction_record_is_caught(
    plaintext_home: Path,
) -> None:
    log = plaintext_home / "log.jsonl"
    log.write_bytes(log.read_bytes().replace(f'"{CVV}"'.encode(), b'{"$redacted":"later"}', 1))
    result = verify(plaintext_home)
    assert result.exit_code == 1
    assert "hash does not match" in result.output
    with pytest.raises(Exception, match="hash does not match"):
        AgentKit(home=plaintext_home).close()


def test_redaction_is_refused_while_an_agent_has_the_log_open(
    plaintext_home: Path, admin_key: Path
) -> None:
    with AgentKit(home=plaintext_home), pytest.raises(LogError, match="stop them first"):
        redact_path(plaintext_home, "args.card.cvv", admin_key=admin_key)
    assert QUOTED_CVV in log_bytes(plaintext_home)


def test_a_disclosure_of_a_masked_saga_still_verifies_offline(
    plaintext_home: Path, admin_key: Path
) -> None:
    redact_path(plaintext_home, "args.card.cvv", admin_key=admin_key)
    verifier = home_verifier(plaintext_home)
    assert verifier is not None
    saga_id = "saga-0001"
    bundle = prove(plaintext_home, saga_id)
    assert QUOTED_CVV.decode() not in json.dumps(bundle)
    assert len(bundle["redactions"]) == 1
    report = verify_bundle(json.dumps(bundle), [verifier])
    assert report.saga == saga_id
    without = {k: v for k, v in bundle.items() if k != "redactions"}
    with pytest.raises(DisclosureError, match="no signed redaction record accounts for them"):
        verify_bundle(without, [verifier])


def test_the_cli_masks_and_says_when_nothing_matched(plaintext_home: Path, admin_key: Path) -> None:
    runner = CliRunner()
    command = ["--home", str(plaintext_home), "redact", "args.card.cvv", "--sign", str(admin_key)]
    done = runner.invoke(main, command)
    assert done.exit_code == 0, done.output
    assert "masked record" in done.output
    again = runner.invoke(main, command)
    assert again.exit_code == 1
    assert "nothing changed" in again.output


def test_the_saga_index_still_agrees_with_the_log_after_a_redaction(
    plaintext_home: Path, admin_key: Path
) -> None:
    """Masking rewrites records in place (new lengths, same hashes): the index built before it
    is discarded, and the one readers build next agrees with the log."""
    runner = CliRunner()
    listed = runner.invoke(main, ["--home", str(plaintext_home), "sagas", "--limit", "5"])
    assert listed.exit_code == 0, listed.output  # the saga index now covers the log
    command = ["--home", str(plaintext_home), "redact", "args.card.cvv", "--sign", str(admin_key)]
    assert runner.invoke(main, command).exit_code == 0
    assert not (plaintext_home / "index" / "sagas.sqlite3").exists()
    assert (
        runner.invoke(main, ["--home", str(plaintext_home), "sagas", "--limit", "5"]).exit_code == 0
    )
    result = verify(plaintext_home)
    assert result.exit_code == 0, result.output
    assert "saga index: agrees with the log (every row and line" in result.output
