"""The AWS pack against moto's server: a real HTTP endpoint on 127.0.0.1, in its own process.

Every check reads the state back from the server (describe-instances, list-buckets,
list-roles), never from the pack's own bookkeeping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from agent_saga import AgentKit, CompensatorRegistry, GateRefused, SagaRolledBack, SagaStatus
from agent_saga_packs.aws import TAG, AwsClients, AwsError, AwsPack, aws_rules
from pytest_agent_saga import ChaosRunner

if TYPE_CHECKING:
    from pathlib import Path

    from conftest import AwsWorld

AMI = "ami-12c6146b"


def kit_for(tmp_path: Path, **options: object) -> AgentKit:
    return AgentKit(home=tmp_path / "agent", registry=CompensatorRegistry(), **options)  # type: ignore[arg-type]


READ_POLICY = "arn:aws:iam::123456789012:policy/artifact-read"  # made by the aws fixture
TRUST_EC2 = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "ec2.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}


def deploy(pack: AwsPack, prefix: str, *, healthy: bool = True, hosts: int = 2) -> None:
    """A deployment agent: artifacts, a role for the hosts, the hosts, then a health check."""
    bucket = f"{prefix}artifacts"
    pack.create_bucket(bucket)
    pack.put_object(bucket, "releases/app-1.4.tar.gz", "release 1.4", "application/gzip")
    pack.create_role(f"{prefix}web", TRUST_EC2, "web hosts")
    pack.attach_role_policy(f"{prefix}web", READ_POLICY)
    for number in range(1, hosts + 1):
        pack.run_instance(AMI, "t3.micro", f"{prefix}web-{number}")
    if not healthy:
        raise RuntimeError("health check failed on web-2")


def test_a_committed_deployment_is_there(aws: AwsWorld, tmp_path: Path) -> None:
    with kit_for(tmp_path) as kit:
        pack = AwsPack(kit, aws.clients)
        with kit.transaction("deploy"):
            deploy(pack, aws.prefix)
    assert aws.live_instances() == [f"{aws.prefix}web-1", f"{aws.prefix}web-2"]
    assert aws.buckets() == {f"{aws.prefix}artifacts": ["releases/app-1.4.tar.gz"]}
    assert aws.roles() == {f"{aws.prefix}web": [READ_POLICY]}


def test_a_failed_deployment_agent_leaves_nothing_running(aws: AwsWorld, tmp_path: Path) -> None:
    with kit_for(tmp_path) as kit:
        pack = AwsPack(kit, aws.clients)
        with pytest.raises(SagaRolledBack) as failed, kit.transaction("deploy"):
            deploy(pack, aws.prefix, healthy=False)
        report = failed.value.report
        assert report.status is SagaStatus.ROLLED_BACK
        # Newest first: hosts, then the policy, the role, the object, the bucket.
        assert [step.tool for step in report.compensated] == [
            "aws.ec2.run_instance",
            "aws.ec2.run_instance",
            "aws.iam.attach_role_policy",
            "aws.iam.create_role",
            "aws.s3.put_object",
            "aws.s3.create_bucket",
        ]
        assert [step.ordinal for step in report.compensated] == [6, 5, 4, 3, 2, 1]
        done = [r.data["ordinal"] for r in kit.store.records() if r.kind == "compensation.done"]
        assert done == [6, 5, 4, 3, 2, 1]
    assert aws.world() == {"instances": [], "buckets": {}, "roles": {}}
    launched = aws.clients.ec2.describe_instances(
        Filters=[{"Name": "tag:Name", "Values": [f"{aws.prefix}web-*"]}]
    )
    states = [i["State"]["Name"] for r in launched["Reservations"] for i in r["Instances"]]
    assert states == ["terminated", "terminated"]


def test_every_resource_carries_the_step_that_made_it(aws: AwsWorld, tmp_path: Path) -> None:
    with kit_for(tmp_path) as kit:
        pack = AwsPack(kit, aws.clients)
        with kit.transaction("deploy"):
            deploy(pack, aws.prefix)
        keys = {
            r.data["tool"]: r.data["idempotency_key"]
            for r in kit.store.records()
            if r.kind == "step.intent"
        }
    s3, iam = aws.clients.s3, aws.clients.iam
    bucket_tags = s3.get_bucket_tagging(Bucket=f"{aws.prefix}artifacts")["TagSet"]
    assert {"Key": TAG, "Value": keys["aws.s3.create_bucket"]} in bucket_tags
    head = s3.head_object(Bucket=f"{aws.prefix}artifacts", Key="releases/app-1.4.tar.gz")
    assert head["Metadata"] == {"agent-saga-key": keys["aws.s3.put_object"]}
    role_tags = iam.list_role_tags(RoleName=f"{aws.prefix}web")["Tags"]
    assert {"Key": TAG, "Value": keys["aws.iam.create_role"]} in role_tags


def test_a_retried_call_makes_one_resource(aws: AwsWorld, tmp_path: Path) -> None:
    pack = AwsPack(kit_for(tmp_path), aws.clients)
    first = pack.instances.launch(AMI, "t3.micro", f"{aws.prefix}web", "key-1")
    again = pack.instances.launch(AMI, "t3.micro", f"{aws.prefix}web", "key-1")
    assert again["instance_id"] == first["instance_id"]
    assert aws.live_instances() == [f"{aws.prefix}web"]
    bucket = f"{aws.prefix}data"
    assert pack.buckets.create(bucket, "key-2") == pack.buckets.create(bucket, "key-2")
    put = pack.buckets.put(bucket, "a.txt", "one", "text/plain", "key-3")
    assert pack.buckets.put(bucket, "a.txt", "one", "text/plain", "key-3") == put
    role = pack.roles.create(f"{aws.prefix}r", TRUST_EC2, "", "key-4")
    assert pack.roles.create(f"{aws.prefix}r", TRUST_EC2, "", "key-4") == role
    assert pack.roles.attach(f"{aws.prefix}r", READ_POLICY, "key-5")["attached"] is True
    assert pack.roles.attach(f"{aws.prefix}r", READ_POLICY, "key-5")["attached"] is True
    assert aws.world() == {
        "instances": [f"{aws.prefix}web"],
        "buckets": {bucket: ["a.txt"]},
        "roles": {f"{aws.prefix}r": [READ_POLICY]},
    }


def test_nothing_it_did_not_make_is_taken_over_or_deleted(aws: AwsWorld, tmp_path: Path) -> None:
    s3 = aws.clients.s3
    theirs = f"{aws.prefix}theirs"
    s3.create_bucket(Bucket=theirs)
    pack = AwsPack(kit_for(tmp_path), aws.clients)
    with pytest.raises(AwsError, match="already exists"):
        pack.buckets.create(theirs, "key-1")
    pack.buckets.create(f"{aws.prefix}ours", "key-2")
    s3.put_object(Bucket=f"{aws.prefix}ours", Key="report.csv", Body=b"a,b")  # someone else's
    with pytest.raises(AwsError, match="already exists"):
        pack.buckets.put(f"{aws.prefix}ours", "report.csv", "x", "text/plain", "key-3")
    with pytest.raises(AwsError, match="not written by agent-saga"):
        pack.buckets.delete(f"{aws.prefix}ours", "key-2")
    with pytest.raises(AwsError, match="not the bucket this step created"):
        pack.buckets.delete(theirs, "key-1")
    assert aws.buckets() == {f"{aws.prefix}ours": ["report.csv"], theirs: []}


def test_an_object_someone_else_added_leaves_the_saga_to_a_human(
    aws: AwsWorld, tmp_path: Path
) -> None:
    bucket = f"{aws.prefix}artifacts"
    with kit_for(tmp_path) as kit:
        pack = AwsPack(kit, aws.clients)
        with pytest.raises(SagaRolledBack) as failed, kit.transaction("deploy"):
            pack.create_bucket(bucket)
            aws.clients.s3.put_object(Bucket=bucket, Key="audit.log", Body=b"kept")
            raise RuntimeError("stop")
    assert failed.value.report.status is SagaStatus.NEEDS_HUMAN
    assert "not written by agent-saga" in str(failed.value.report.failed[0].error)
    assert aws.buckets() == {bucket: ["audit.log"]}


def test_probes_describe_what_landed(aws: AwsWorld, tmp_path: Path) -> None:
    with kit_for(tmp_path) as kit:
        pack = AwsPack(kit, aws.clients)
        with kit.transaction("host"):
            host = pack.run_instance(AMI, "t3.micro", f"{aws.prefix}web")
        key = next(
            str(r.data["idempotency_key"]) for r in kit.store.records() if r.kind == "step.intent"
        )
    assert pack.describe_instance(host["instance_id"])["state"] == "running"  # type: ignore[index]
    assert pack._instance_landed(key) == {**host, "state": "running"}
    assert pack._instance_landed("as1-never-made") is False
    assert pack._bucket_landed(f"{aws.prefix}none", "k") is False
    assert pack._role_landed(f"{aws.prefix}none", "k") is False


def test_the_rules_refuse_big_hosts_and_administrator_rights(aws: AwsWorld, tmp_path: Path) -> None:
    with kit_for(tmp_path, rules=aws_rules(launches_per_saga=1)) as kit:
        pack = AwsPack(kit, aws.clients)
        with kit.transaction("grab"):
            with pytest.raises(GateRefused, match=r"instance_type='p5\.48xlarge' is not one of"):
                pack.run_instance(AMI, "p5.48xlarge", f"{aws.prefix}gpu")
            with pytest.raises(GateRefused, match="is on the deny list"):
                pack.attach_role_policy("any", "arn:aws:iam::aws:policy/AdministratorAccess")
            pack.run_instance(AMI, "t3.micro", f"{aws.prefix}one")
            with pytest.raises(GateRefused) as third:
                pack.run_instance(AMI, "t3.micro", f"{aws.prefix}two")
    assert third.value.rule == "launches_per_saga"
    assert aws.live_instances() == [f"{aws.prefix}one"]


def test_clients_are_not_shared_with_a_forked_child(aws: AwsWorld) -> None:
    clients = AwsClients(region="us-east-1", endpoint_url=aws.clients.endpoint_url)
    parent = clients.s3
    assert clients.s3 is parent
    assert clients.session() is clients.session()
    assert repr(clients).startswith("AwsClients(region='us-east-1'")


def test_every_fault_point_of_a_deployment(
    aws: AwsWorld, saga_kit: AgentKit, saga_chaos: ChaosRunner
) -> None:
    pack = AwsPack(saga_kit, aws.clients)
    report = saga_chaos.run(
        lambda: deploy(pack, aws.prefix, hosts=1), world=aws.world, reset=aws.reset, name="deploy"
    )
    assert {result.kind for result in report.results} == {
        "exception",
        "compensation",
        "kill",
        "duplicate",
    }
    assert len(report.results) > 40
    assert report.ok
