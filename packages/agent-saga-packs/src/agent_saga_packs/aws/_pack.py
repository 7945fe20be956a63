"""The AWS pack's tools: EC2 instances, S3 buckets and objects, IAM roles; and their undoing.

Every tool is COMPENSABLE and marks what it makes with the step's idempotency key (a tag, or
object metadata). A retry with the same key finds the resource instead of making a second
one; the probe answers "did it land?" after a crash by looking for the key; a compensation
removes a resource only if it carries the key, so it never deletes something it did not make.
Compensations run newest first: instances terminated, policies detached, roles deleted,
objects deleted, buckets deleted (empty by then: their objects' steps were undone first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agent_saga import COMPENSABLE, AllowValues, DenyValues, RateLimit, Rule

from .._declare import Declarer
from .._saga_mark import saga_mark
from ._clients import TAG, AwsClients
from ._ec2 import Instances
from ._iam import Roles
from ._s3 import Buckets

if TYPE_CHECKING:
    from agent_saga import AgentKit

_PARTITIONS = ("aws", "aws-cn", "aws-us-gov", "aws-iso", "aws-iso-b", "aws-iso-e", "aws-iso-f")
"""AWS partitions: the same managed policy has one ARN in each."""
ADMIN_POLICIES = tuple(
    f"arn:{partition}:iam::aws:policy/{policy}"
    for partition in _PARTITIONS
    for policy in ("AdministratorAccess", "IAMFullAccess")
)
"""Managed policies that make a role an administrator, in every partition."""


class AwsPack:
    """The AWS tools, declared on ``kit`` (or process-wide when ``kit`` is ``None``).

    Tools (under ``prefix``): ``ec2.run_instance(image_id, instance_type, name)``,
    ``s3.create_bucket(bucket)``, ``s3.put_object(bucket, object_key, body,
    content_type="application/octet-stream")``, ``iam.create_role(role_name, trust_policy,
    description="")`` and ``iam.attach_role_policy(role_name, policy_arn)``.
    """

    def __init__(self, kit: AgentKit | None, clients: AwsClients, *, prefix: str = "aws") -> None:
        self.clients = clients
        self.instances = Instances(clients)
        self.buckets = Buckets(clients)
        self.roles = Roles(clients)
        declare = Declarer(kit, prefix)
        self.tool_names = {
            action: declare.name(action)
            for action in (
                "ec2.run_instance",
                "s3.create_bucket",
                "s3.put_object",
                "iam.create_role",
                "iam.attach_role_policy",
            )
        }
        for action, undo in (
            ("ec2.terminate_instance", self._terminate),
            ("s3.delete_bucket", self._delete_bucket),
            ("s3.delete_object", self._delete_object),
            ("iam.delete_role", self._delete_role),
            ("iam.detach_role_policy", self._detach),
        ):
            declare.compensator(action, undo)
        tool = declare.tool
        self.run_instance: Callable[..., dict[str, Any]] = tool(
            self._run_instance, "ec2.run_instance", COMPENSABLE,
            compensate="ec2.terminate_instance", probe=self._instance_landed,
        )  # fmt: skip
        self.create_bucket: Callable[..., dict[str, Any]] = tool(
            self._create_bucket, "s3.create_bucket", COMPENSABLE,
            compensate="s3.delete_bucket", probe=self._bucket_landed,
        )  # fmt: skip
        self.put_object: Callable[..., dict[str, Any]] = tool(
            self._put_object, "s3.put_object", COMPENSABLE,
            compensate="s3.delete_object", probe=self._object_landed,
        )  # fmt: skip
        self.create_role: Callable[..., dict[str, Any]] = tool(
            self._create_role, "iam.create_role", COMPENSABLE,
            compensate="iam.delete_role", probe=self._role_landed,
        )  # fmt: skip
        self.attach_role_policy: Callable[..., dict[str, Any]] = tool(
            self._attach, "iam.attach_role_policy", COMPENSABLE,
            compensate="iam.detach_role_policy", probe=self._attach_landed,
        )  # fmt: skip

    # -- describing what is there --------------------------------------------------------------

    def describe_instance(self, instance_id: str) -> dict[str, Any] | None:
        """The instance's id, image, type, name and state, or ``None``."""
        return self.instances.describe(instance_id)

    def live_instances(self) -> list[dict[str, Any]]:
        """Every instance that is not terminated."""
        return self.instances.live()

    # -- EC2 -----------------------------------------------------------------------------------

    def _run_instance(
        self, image_id: str, instance_type: str, name: str, *, idempotency_key: str
    ) -> dict[str, Any]:
        """Launch one EC2 instance of ``instance_type`` from ``image_id``, named ``name``."""
        return self.instances.launch(image_id, instance_type, name, idempotency_key)

    def _instance_landed(self, idempotency_key: str) -> dict[str, Any] | bool:
        return self.instances.find(idempotency_key) or False

    def _terminate(self, result: Mapping[str, Any]) -> None:
        self.instances.terminate(str(result["instance_id"]))

    # -- S3 ------------------------------------------------------------------------------------

    def _create_bucket(self, bucket: str, *, idempotency_key: str) -> dict[str, Any]:
        """Create S3 bucket ``bucket`` (refused if it exists)."""
        made = self.buckets.create(bucket, idempotency_key, saga_mark())
        return {**made, "made_by": idempotency_key}

    def _bucket_landed(self, bucket: str, idempotency_key: str) -> dict[str, Any] | bool | None:
        if not self.buckets.exists(bucket):
            return False
        if self.buckets.made_by(bucket) == idempotency_key:
            region = self.clients.region_name
            return {"bucket": bucket, "region": region, "made_by": idempotency_key}
        return None  # there, but untagged: made by this call, cut short, or by someone else

    def _delete_bucket(self, result: Mapping[str, Any]) -> None:
        # The tag carries the step's key (``made_by``), not the compensation's own.
        self.buckets.delete(str(result["bucket"]), str(result["made_by"]))

    def _put_object(
        self,
        bucket: str,
        object_key: str,
        body: str,
        content_type: str = "application/octet-stream",
        *,
        idempotency_key: str,
    ) -> dict[str, Any]:
        """Write a new object ``object_key`` in ``bucket`` (refused if it exists)."""
        written = self.buckets.put(
            bucket, object_key, body, content_type, idempotency_key, saga_mark()
        )
        return {**written, "made_by": idempotency_key}

    def _object_landed(
        self, bucket: str, object_key: str, idempotency_key: str
    ) -> dict[str, Any] | bool:
        there = self.buckets.head(bucket, object_key)
        if there is None or there["key"] != idempotency_key:
            return False
        return {"bucket": bucket, "object_key": object_key, "etag": there["etag"],
                "version_id": there["version_id"], "made_by": idempotency_key}  # fmt: skip

    def _delete_object(self, result: Mapping[str, Any]) -> None:
        self.buckets.delete_object(
            str(result["bucket"]), str(result["object_key"]), str(result["made_by"])
        )

    # -- IAM -----------------------------------------------------------------------------------

    def _create_role(
        self,
        role_name: str,
        trust_policy: Mapping[str, Any],
        description: str = "",
        *,
        idempotency_key: str,
    ) -> dict[str, Any]:
        """Create IAM role ``role_name`` with the trust policy ``trust_policy``."""
        made = self.roles.create(role_name, trust_policy, description, idempotency_key, saga_mark())
        return {**made, "made_by": idempotency_key}

    def _role_landed(self, role_name: str, idempotency_key: str) -> dict[str, Any] | bool:
        tags = self.roles.tags(role_name)
        if tags is None or tags.get(TAG) != idempotency_key:
            return False
        return {"role_name": role_name, "made_by": idempotency_key}

    def _delete_role(self, result: Mapping[str, Any]) -> None:
        self.roles.delete(str(result["role_name"]), str(result["made_by"]))

    def _attach(self, role_name: str, policy_arn: str, *, idempotency_key: str) -> dict[str, Any]:
        """Attach managed policy ``policy_arn`` to role ``role_name``."""
        return self.roles.attach(role_name, policy_arn, idempotency_key, saga_mark())

    def _attach_landed(
        self, role_name: str, policy_arn: str, idempotency_key: str
    ) -> dict[str, Any] | bool:
        if not self.roles.attached_by(role_name, policy_arn, idempotency_key):
            return False
        return {"role_name": role_name, "policy_arn": policy_arn, "attached": True,
                "made_by": idempotency_key}  # fmt: skip

    def _detach(self, result: Mapping[str, Any]) -> None:
        if result.get("attached"):
            made_by = result.get("made_by")  # absent in results logged before it was recorded
            self.roles.detach(
                str(result["role_name"]),
                str(result["policy_arn"]),
                None if made_by is None else str(made_by),
            )


def aws_rules(
    *,
    instance_types: Iterable[str] = ("t3.nano", "t3.micro", "t3.small"),
    denied_policies: Iterable[str] = ADMIN_POLICIES,
    launches_per_saga: int = 5,
    prefix: str = "aws",
) -> list[Rule]:
    """From the core's library: an allow list of instance types (``AllowValues``), a deny list
    of managed policies (``DenyValues``: no agent grants itself administrator rights), and at
    most ``launches_per_saga`` instance launches per saga per hour (``RateLimit``)."""
    run, attach = f"{prefix}.ec2.run_instance", f"{prefix}.iam.attach_role_policy"
    return [
        AllowValues("instance_type", instance_types, tools=run, name="instance_types"),
        DenyValues("policy_arn", denied_policies, tools=attach, name="denied_policies"),
        RateLimit(launches_per_saga, 3_600, tools=run, per="saga", name="launches_per_saga"),
    ]
