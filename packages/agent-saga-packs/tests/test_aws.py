"""The AWS pack against moto's server: a real HTTP endpoint on 127.0.0.1, in its own process.

Every check reads the state back from the server (describe-instances, list-buckets,
list-roles), never from the pack's own bookkeeping.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import warnings
from typing import TYPE_CHECKING

import pytest
from agent_saga import AgentKit, CompensatorRegistry, GateRefused, SagaRolledBack, SagaStatus
from agent_saga_packs.aws import (
    SAGA_TAG,
    TAG,
    AwsClients,
    AwsError,
    AwsPack,
    attach_saga_tag,
    aws_rules,
)
from pytest_agent_saga import ChaosRunner

if TYPE_CHECKING:
    from pathlib import Path

    from conftest import AwsWorld

AMI = "ami-12c6146b"
OTHER_SAGA = "f" * 32  # the mark of another saga


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
    mark = head["Metadata"]["agent-saga-saga"]  # the saga's mark, the same on everything
    assert head["Metadata"] == {
        "agent-saga-key": keys["aws.s3.put_object"],
        "agent-saga-saga": mark,
    }
    assert len(mark) == 32
    assert {"Key": SAGA_TAG, "Value": mark} in bucket_tags
    role_tags = {
        t["Key"]: t["Value"] for t in iam.list_role_tags(RoleName=f"{aws.prefix}web")["Tags"]
    }
    assert role_tags[TAG] == keys["aws.iam.create_role"]
    assert role_tags[SAGA_TAG] == role_tags[attach_saga_tag(READ_POLICY)] == mark


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
    with pytest.raises(AwsError, match=r"1 object\(s\) not written by this saga \(first: rep"):
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
    assert "1 object(s) not written by this saga (first: audit.log); left in place" in str(
        failed.value.report.failed[0].error
    )
    assert aws.buckets() == {bucket: ["audit.log"]}


def test_an_object_another_saga_wrote_keeps_the_bucket(aws: AwsWorld, tmp_path: Path) -> None:
    bucket = f"{aws.prefix}shared"
    with kit_for(tmp_path) as kit:
        pack = AwsPack(kit, aws.clients)
        with pytest.raises(SagaRolledBack) as failed, kit.transaction("deploy"):
            pack.create_bucket(bucket)
            # Another agent's committed step writes into the new bucket meanwhile.
            pack.buckets.put(bucket, "theirs.tar.gz", "theirs", "application/gzip", "as1-theirs",
                             OTHER_SAGA)  # fmt: skip
            raise RuntimeError("stop")
    assert failed.value.report.status is SagaStatus.NEEDS_HUMAN
    assert "1 object(s) not written by this saga (first: theirs.tar.gz); left in place" in str(
        failed.value.report.failed[0].error
    )
    assert aws.buckets() == {bucket: ["theirs.tar.gz"]}


def test_a_policy_another_saga_attached_keeps_the_role(aws: AwsWorld, tmp_path: Path) -> None:
    role = f"{aws.prefix}shared"
    with kit_for(tmp_path) as kit:
        pack = AwsPack(kit, aws.clients)
        with pytest.raises(SagaRolledBack) as failed, kit.transaction("deploy"):
            pack.create_role(role, TRUST_EC2)
            pack.roles.attach(role, READ_POLICY, "as1-theirs", OTHER_SAGA)  # another agent's
            raise RuntimeError("stop")
    assert failed.value.report.status is SagaStatus.NEEDS_HUMAN
    assert f"{READ_POLICY} was attached by someone else or another saga; left in place" in str(
        failed.value.report.failed[0].error
    )
    assert aws.roles() == {role: [READ_POLICY]}


def test_a_policy_attached_again_by_another_step_is_not_detached(
    aws: AwsWorld, tmp_path: Path
) -> None:
    role = f"{aws.prefix}theirs"
    iam = aws.clients.iam
    iam.create_role(RoleName=role, AssumeRolePolicyDocument=json.dumps(TRUST_EC2))
    with kit_for(tmp_path) as kit:
        pack = AwsPack(kit, aws.clients)
        with pytest.raises(SagaRolledBack) as failed, kit.transaction("grant"):
            assert pack.attach_role_policy(role, READ_POLICY)["attached"] is True
            iam.detach_role_policy(RoleName=role, PolicyArn=READ_POLICY)  # a person takes it off
            pack.roles.attach(role, READ_POLICY, "as1-theirs")  # another step puts it back
            raise RuntimeError("stop")
    assert failed.value.report.status is SagaStatus.ROLLED_BACK
    assert aws.roles() == {role: [READ_POLICY]}
    assert pack.roles.attached_by(role, READ_POLICY, "as1-theirs")


def test_administrator_policies_are_refused_in_every_partition(
    aws: AwsWorld, tmp_path: Path
) -> None:
    with kit_for(tmp_path, rules=aws_rules()) as kit:
        pack = AwsPack(kit, aws.clients)
        with kit.transaction("grab"):
            for partition in ("aws", "aws-cn", "aws-us-gov"):
                for policy in ("AdministratorAccess", "IAMFullAccess"):
                    arn = f"arn:{partition}:iam::aws:policy/{policy}"
                    with pytest.raises(GateRefused, match="is on the deny list"):
                        pack.attach_role_policy(f"{aws.prefix}r", arn)


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


def test_a_child_forked_while_a_thread_builds_the_session_builds_its_own() -> None:
    """A thread holds the session lock (building the session) when the process forks: the
    child must not inherit the held lock, or its first client waits forever."""
    import boto3

    parent, building, release = os.getpid(), threading.Event(), threading.Event()

    def slow_session() -> boto3.Session:
        if os.getpid() == parent:
            building.set()
            release.wait(10)
        return boto3.Session(region_name="us-east-1")

    clients = AwsClients(session=slow_session)
    builder = threading.Thread(target=clients.session)
    builder.start()
    assert building.wait(10)
    with warnings.catch_warnings():  # forking with a thread running is the point here
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns into pytest
        signal.alarm(5)  # a deadlock ends the child with SIGALRM
        code = 0 if clients.session().region_name == "us-east-1" else 1
        os._exit(code)
    release.set()
    builder.join(10)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


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
