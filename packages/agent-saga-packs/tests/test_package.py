"""The packages' surface: what each pack exports, what importing it loads, what it declares."""

from __future__ import annotations

import importlib
from pathlib import Path

import agent_saga_packs
import pytest
from agent_saga import COMPENSABLE, IRREVERSIBLE, AgentKit, CompensatorRegistry, tool_spec
from agent_saga.testing import installed_from, modules_after_import
from agent_saga_packs.aws import AwsClients, AwsPack
from agent_saga_packs.clinical import ClinicalPack
from agent_saga_packs.git import GitPack, LocalRepository
from agent_saga_packs.payments import PaymentsPack
from agent_saga_packs.robotics import ArmPack
from agent_saga_packs.testing import LedgerBank, SimulatedServo, SQLiteOrderBook

PACKS = ("git", "aws", "payments", "clinical", "robotics")
PUBLIC = {
    "agent_saga_packs": ["DuplicateWithin", "RecentEffects", "__version__"],
    "agent_saga_packs.git": [
        "GitError",
        "GitHubHosting",
        "GitLabHosting",
        "GitPack",
        "Hosting",
        "HostingError",
        "LocalRepository",
        "PullRequest",
        "git_rules",
        "marker",
    ],
    "agent_saga_packs.aws": [
        "ADMIN_POLICIES",
        "METADATA",
        "SAGA_METADATA",
        "SAGA_TAG",
        "TAG",
        "AwsClients",
        "AwsError",
        "AwsPack",
        "attach_saga_tag",
        "attach_tag",
        "aws_rules",
    ],
    "agent_saga_packs.payments": ["Bank", "DuplicateWithin", "PaymentsPack", "wire_rules"],
    "agent_saga_packs.clinical": [
        "MG_PER_UNIT",
        "ClinicalPack",
        "DoseError",
        "DoseLimit",
        "DoseRange",
        "DuplicateWithin",
        "OrderSystem",
        "dose_in_mg",
        "drug_key",
        "order_rules",
    ],
    "agent_saga_packs.robotics": ["ArmPack", "JointRange", "SensorRange", "Servo", "arm_rules"],
    "agent_saga_packs.testing": [
        "BankError",
        "LedgerBank",
        "OrderError",
        "SQLiteOrderBook",
        "ServoFault",
        "SimulatedServo",
    ],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_the_public_surface_is_pinned(module: str) -> None:
    loaded = importlib.import_module(module)
    assert loaded.__all__ == PUBLIC[module]
    for name in PUBLIC[module]:
        assert getattr(loaded, name) is not None


@pytest.mark.parametrize("module", ["agent_saga_packs", *(f"agent_saga_packs.{p}" for p in PACKS)])
def test_importing_a_pack_loads_no_client_library(module: str) -> None:
    loaded = modules_after_import(module)
    assert "agent_saga" in loaded
    assert loaded & {"github", "gitlab", "boto3", "botocore", "requests", "moto"} == set()


def test_the_client_libraries_are_the_installed_distributions() -> None:
    for module, distribution in [("github", "PyGithub"), ("gitlab", "python-gitlab"),
                                 ("boto3", "boto3"), ("moto", "moto")]:  # fmt: skip
        assert installed_from(importlib.import_module(module), distribution), module


def test_every_tool_declares_its_semantics_compensation_and_probe(tmp_path: Path) -> None:
    registry = CompensatorRegistry()
    with AgentKit(home=tmp_path / "agent", registry=registry) as kit:
        packs = [
            GitPack(kit, LocalRepository(tmp_path)),
            AwsPack(kit, AwsClients(region="us-east-1", endpoint_url="http://127.0.0.1:9")),
            PaymentsPack(kit, LedgerBank(tmp_path / "bank.db")),
            ClinicalPack(kit, SQLiteOrderBook(tmp_path / "orders.db")),
            ArmPack(kit, SimulatedServo(tmp_path / "servo.json", end_stops={"elbow": (0, 90)})),
        ]
        declared = {}
        for pack in packs:
            for attribute, name in pack.tool_names.items():  # type: ignore[attr-defined]
                spec = tool_spec(getattr(pack, attribute.rsplit(".", 1)[-1]))
                assert spec is not None
                assert spec.name == name
                declared[name] = spec
    irreversible = {name for name, spec in declared.items() if spec.semantics is IRREVERSIBLE}
    assert irreversible == {"payments.wire"}
    for name, spec in declared.items():
        assert registry.probe(name) is not None, name
        if name != "payments.wire":
            assert spec.semantics is COMPENSABLE, name
            assert spec.compensation is not None, name
            assert spec.compensation.recoverable, name
            assert registry.get(str(spec.compensation.name)) is not None, name
    assert len(declared) == 14
    assert sorted(registry.names()) == [
        "arm.return_to_safe_pose",
        "aws.ec2.terminate_instance",
        "aws.iam.delete_role",
        "aws.iam.detach_role_policy",
        "aws.s3.delete_bucket",
        "aws.s3.delete_object",
        "clinical.cancel_order",
        "git.close_pr",
        "git.delete_branch",
        "git.reset_branch",
        "git.restore_remote_branch",
        "git.revert_merge",
        "payments.refund",
    ]


def test_a_pack_needs_a_proper_prefix(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="non-empty name without spaces"):
        ArmPack(None, SimulatedServo(tmp_path / "s.json", end_stops={}), prefix=" arm")
    assert agent_saga_packs.__version__ == "0.1.0"
