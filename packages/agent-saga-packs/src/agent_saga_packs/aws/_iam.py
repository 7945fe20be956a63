"""IAM roles and their attached policies, each undone only when the step made it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ._clients import SAGA_TAG, TAG, AwsClients, AwsError, error_code, one_line


def attach_tag(policy_arn: str) -> str:
    """The role tag that records which step attached ``policy_arn``."""
    return f"agent-saga:attached:{hashlib.sha256(policy_arn.encode()).hexdigest()[:16]}"


def attach_saga_tag(policy_arn: str) -> str:
    """The role tag that records the mark of the saga whose step attached ``policy_arn``."""
    return f"agent-saga:attached-saga:{hashlib.sha256(policy_arn.encode()).hexdigest()[:16]}"


class Roles:
    """Create and delete roles; attach and detach their managed policies."""

    def __init__(self, clients: AwsClients) -> None:
        self.clients = clients

    def tags(self, role_name: str) -> dict[str, str] | None:
        """The role's tags, or ``None`` when there is no such role."""
        try:
            found = self.clients.iam.list_role_tags(RoleName=role_name)
        except Exception as failure:
            if error_code(failure) == "NoSuchEntity":
                return None
            raise one_line(f"iam list-role-tags {role_name}", failure) from None
        return {tag["Key"]: tag["Value"] for tag in found.get("Tags", [])}

    def create(
        self,
        role_name: str,
        trust_policy: Mapping[str, Any],
        description: str,
        key: str,
        saga: str | None = None,
    ) -> dict[str, Any]:
        """Create the role tagged with ``key`` (and the saga's mark); an existing role is
        refused unless this step made it (a retry)."""
        iam = self.clients.iam
        tags = [{"Key": TAG, "Value": key}]
        if saga is not None:
            tags.append({"Key": SAGA_TAG, "Value": saga})
        try:
            made = iam.create_role(
                RoleName=role_name,
                AssumeRolePolicyDocument=json.dumps(trust_policy, sort_keys=True),
                Description=description,
                Tags=tags,  # type: ignore[arg-type]
            )
        except Exception as failure:
            if error_code(failure) != "EntityAlreadyExists":
                raise one_line(f"iam create-role {role_name}", failure) from None
            if (self.tags(role_name) or {}).get(TAG) != key:
                raise AwsError(f"iam create-role {role_name}: the role already exists") from None
            arn = iam.get_role(RoleName=role_name)["Role"]["Arn"]
            return {"role_name": role_name, "arn": arn}
        return {"role_name": role_name, "arn": made["Role"]["Arn"]}

    def delete(self, role_name: str, key: str) -> None:
        """Delete the role the step with ``key`` made (gone: done; someone else's: raise)."""
        tags = self.tags(role_name)
        if tags is None:
            return
        if tags.get(TAG) != key:
            raise AwsError(f"iam delete-role {role_name}: not the role this step created")
        # Policies this saga's steps attached (their own undo failed or never ran) go first; a
        # policy anyone else attached, another saga's included, keeps the role.
        saga = tags.get(SAGA_TAG)
        attached = self.attached(role_name)
        foreign = [
            arn for arn in attached if saga is None or tags.get(attach_saga_tag(arn)) != saga
        ]
        if foreign:
            raise AwsError(
                f"iam delete-role {role_name}: {foreign[0]} was attached by someone else or "
                "another saga; left in place"
            )
        for arn in attached:
            self.detach(role_name, arn)
        try:
            self.clients.iam.delete_role(RoleName=role_name)
        except Exception as failure:
            raise one_line(f"iam delete-role {role_name}", failure) from None

    def attached(self, role_name: str) -> list[str]:
        found = self.clients.iam.list_attached_role_policies(RoleName=role_name)
        return sorted(p["PolicyArn"] for p in found.get("AttachedPolicies", []))

    def attach(
        self, role_name: str, policy_arn: str, key: str, saga: str | None = None
    ) -> dict[str, Any]:
        """Attach ``policy_arn``; ``attached`` is False when it already was (no effect, nothing
        to undo). Which step attached it is recorded on the role first (``made_by``)."""
        result: dict[str, Any] = {"role_name": role_name, "policy_arn": policy_arn, "made_by": key}
        try:
            attached = self.attached(role_name)
        except Exception as failure:
            raise one_line(f"iam attach-role-policy {role_name}", failure) from None
        if policy_arn in attached:
            tags = self.tags(role_name) or {}
            return {**result, "attached": tags.get(attach_tag(policy_arn)) == key}
        iam = self.clients.iam
        try:
            marks = [{"Key": attach_tag(policy_arn), "Value": key}]
            if saga is not None:
                marks.append({"Key": attach_saga_tag(policy_arn), "Value": saga})
            iam.tag_role(RoleName=role_name, Tags=marks)  # type: ignore[arg-type]
            iam.attach_role_policy(RoleName=role_name, PolicyArn=policy_arn)
        except Exception as failure:
            raise one_line(f"iam attach-role-policy {role_name} {policy_arn}", failure) from None
        return {**result, "attached": True}

    def attached_by(self, role_name: str, policy_arn: str, key: str) -> bool:
        """Is ``policy_arn`` attached to the role, by the step with ``key``?"""
        tags = self.tags(role_name)
        if tags is None or tags.get(attach_tag(policy_arn)) != key:
            return False
        return policy_arn in self.attached(role_name)

    def detach(self, role_name: str, policy_arn: str, key: str | None = None) -> None:
        """Detach ``policy_arn`` and drop the record of who attached it (gone: done).

        With ``key``, only the attachment the step with ``key`` made: a policy attached again
        since by another step (the role's record names that step) is not this one's to undo.
        """
        if key is not None:
            tags = self.tags(role_name)
            if tags is None or tags.get(attach_tag(policy_arn)) != key:
                return
        iam = self.clients.iam
        try:
            iam.detach_role_policy(RoleName=role_name, PolicyArn=policy_arn)
        except Exception as failure:
            if error_code(failure) != "NoSuchEntity":
                raise one_line(f"iam detach-role-policy {role_name}", failure) from None
        try:
            iam.untag_role(
                RoleName=role_name, TagKeys=[attach_tag(policy_arn), attach_saga_tag(policy_arn)]
            )
        except Exception as failure:
            if error_code(failure) != "NoSuchEntity":
                raise one_line(f"iam untag-role {role_name}", failure) from None
