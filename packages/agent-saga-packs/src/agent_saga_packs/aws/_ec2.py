"""EC2 instances: launched with the step's key as client token and tag, terminated to undo."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._clients import TAG, AwsClients, error_code, one_line

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import InstanceTypeDef, TagSpecificationTypeDef

LIVE_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")


def _summary(instance: InstanceTypeDef) -> dict[str, Any]:
    tags = {tag.get("Key"): tag.get("Value") for tag in instance.get("Tags", [])}
    return {
        "instance_id": instance["InstanceId"],
        "image_id": instance.get("ImageId"),
        "instance_type": instance.get("InstanceType"),
        "name": tags.get("Name"),
        "state": instance.get("State", {}).get("Name"),
    }


class Instances:
    """Launch, find and terminate EC2 instances."""

    def __init__(self, clients: AwsClients) -> None:
        self.clients = clients

    def find(self, key: str) -> dict[str, Any] | None:
        """The instance launched by the step with ``key`` (in any state), or ``None``."""
        try:
            pages = self.clients.ec2.describe_instances(
                Filters=[{"Name": f"tag:{TAG}", "Values": [key]}]
            )
        except Exception as failure:
            raise one_line("ec2 describe-instances", failure) from None
        for reservation in pages.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                return _summary(instance)
        return None

    def launch(self, image_id: str, instance_type: str, name: str, key: str) -> dict[str, Any]:
        """One instance, tagged ``Name`` and with the step's key. Idempotent on ``key`` (its
        client token for EC2, and a lookup by tag first)."""
        found = self.find(key)
        if found is not None:
            return found
        tagged: TagSpecificationTypeDef = {
            "ResourceType": "instance",
            "Tags": [{"Key": "Name", "Value": name}, {"Key": TAG, "Value": key}],
        }
        try:
            launched = self.clients.ec2.run_instances(
                ImageId=image_id,
                InstanceType=instance_type,  # type: ignore[arg-type]
                MinCount=1,
                MaxCount=1,
                ClientToken=key[:64],
                TagSpecifications=[tagged],
            )
        except Exception as failure:
            raise one_line("ec2 run-instances", failure) from None
        return _summary(launched["Instances"][0])

    def describe(self, instance_id: str) -> dict[str, Any] | None:
        try:
            found = self.clients.ec2.describe_instances(InstanceIds=[instance_id])
        except Exception as failure:
            if "NotFound" in str(failure):
                return None
            raise one_line("ec2 describe-instances", failure) from None
        for reservation in found.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                return _summary(instance)
        return None

    def terminate(self, instance_id: str) -> None:
        """Terminate (idempotent: a terminated or unknown instance is left as it is)."""
        try:
            self.clients.ec2.terminate_instances(InstanceIds=[instance_id])
        except Exception as failure:
            if error_code(failure) == "InvalidInstanceID.NotFound":
                return
            raise one_line(f"ec2 terminate-instances {instance_id}", failure) from None

    def live(self) -> list[dict[str, Any]]:
        """Every instance not terminated (pending, running, stopping, stopped)."""
        found = self.clients.ec2.describe_instances(
            Filters=[{"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
        )
        return [
            _summary(instance)
            for reservation in found.get("Reservations", [])
            for instance in reservation.get("Instances", [])
        ]
