"""S3 buckets and objects: made with the step's key attached, deleted only when it matches."""

from __future__ import annotations

from typing import Any

from ._clients import (
    METADATA,
    SAGA_METADATA,
    SAGA_TAG,
    TAG,
    AwsClients,
    AwsError,
    error_code,
    one_line,
)

MISSING = ("404", "NoSuchBucket", "NoSuchKey", "NotFound")


class Buckets:
    """Create, find and delete buckets and the objects in them."""

    def __init__(self, clients: AwsClients) -> None:
        self.clients = clients

    # -- buckets -------------------------------------------------------------------------------

    def exists(self, bucket: str) -> bool:
        try:
            self.clients.s3.head_bucket(Bucket=bucket)
        except Exception as failure:
            if error_code(failure) in MISSING:
                return False
            raise one_line(f"s3 head-bucket {bucket}", failure) from None
        return True

    def made_by(self, bucket: str) -> str | None:
        """The key tagged on ``bucket`` (``None``: no such tag or no such bucket)."""
        try:
            tags = self.clients.s3.get_bucket_tagging(Bucket=bucket)["TagSet"]
        except Exception as failure:
            if error_code(failure) in (*MISSING, "NoSuchTagSet"):
                return None
            raise one_line(f"s3 get-bucket-tagging {bucket}", failure) from None
        return next((tag["Value"] for tag in tags if tag["Key"] == TAG), None)

    def create(self, bucket: str, key: str, saga: str | None = None) -> dict[str, Any]:
        """Create ``bucket`` and tag it with ``key`` (and the saga's mark); a bucket that
        already exists is refused, unless this step made it (a retry)."""
        result = {"bucket": bucket, "region": self.clients.region_name}
        if self.exists(bucket):
            if self.made_by(bucket) == key:
                return result
            raise AwsError(f"s3 create-bucket {bucket}: the bucket already exists")
        s3 = self.clients.s3
        try:
            if result["region"] == "us-east-1":
                s3.create_bucket(Bucket=bucket)
            else:
                s3.create_bucket(
                    Bucket=bucket,
                    CreateBucketConfiguration={"LocationConstraint": result["region"]},  # type: ignore[typeddict-item]
                )
            tags = [{"Key": TAG, "Value": key}]
            if saga is not None:
                tags.append({"Key": SAGA_TAG, "Value": saga})
            s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": tags})  # type: ignore[typeddict-item]
        except Exception as failure:
            raise one_line(f"s3 create-bucket {bucket}", failure) from None
        return result

    def delete(self, bucket: str, key: str) -> None:
        """Delete ``bucket`` if it is the one the step with ``key`` made (gone: done).

        Objects still in it that carry the bucket's saga mark are deleted first (the saga's own,
        whose undo failed or never ran). An object anyone else wrote, another saga's included,
        keeps the bucket in place.
        """
        try:
            tags = self.clients.s3.get_bucket_tagging(Bucket=bucket)["TagSet"]
        except Exception as failure:
            if error_code(failure) in MISSING:
                return  # gone: nothing to undo
            if error_code(failure) != "NoSuchTagSet":
                raise one_line(f"s3 get-bucket-tagging {bucket}", failure) from None
            tags = []
        found = {t["Key"]: t["Value"] for t in tags}
        if found.get(TAG) != key:
            raise AwsError(f"s3 delete-bucket {bucket}: not the bucket this step created")
        saga = found.get(SAGA_TAG)
        heads = {name: self.head(bucket, name) or {} for name in self.objects(bucket)}
        foreign = sorted(
            name
            for name, head in heads.items()
            if saga is None or head.get("saga") != saga or head.get("key") is None
        )
        if foreign:
            raise AwsError(
                f"s3 delete-bucket {bucket}: it holds {len(foreign)} object(s) not written by "
                f"this saga (first: {foreign[0]}); left in place"
            )
        for name, head in heads.items():
            self.delete_object(bucket, name, str(head["key"]))
        try:
            self.clients.s3.delete_bucket(Bucket=bucket)
        except Exception as failure:
            raise one_line(f"s3 delete-bucket {bucket}", failure) from None

    def names(self) -> list[str]:
        return sorted(b["Name"] for b in self.clients.s3.list_buckets().get("Buckets", []))

    # -- objects -------------------------------------------------------------------------------

    def head(self, bucket: str, object_key: str) -> dict[str, Any] | None:
        try:
            found = self.clients.s3.head_object(Bucket=bucket, Key=object_key)
        except Exception as failure:
            if error_code(failure) in MISSING:
                return None
            raise one_line(f"s3 head-object s3://{bucket}/{object_key}", failure) from None
        return {
            "etag": found.get("ETag"),
            "version_id": found.get("VersionId"),
            "key": found.get("Metadata", {}).get(METADATA),
            "saga": found.get("Metadata", {}).get(SAGA_METADATA),
        }

    def put(
        self,
        bucket: str,
        object_key: str,
        body: str,
        content_type: str,
        key: str,
        saga: str | None = None,
    ) -> dict[str, Any]:
        """Create the object (never overwrite: ``If-None-Match: *``) with ``key`` (and the
        saga's mark) in its metadata. An object already there is refused, unless this step
        wrote it (a retry)."""
        result: dict[str, Any] = {"bucket": bucket, "object_key": object_key}
        metadata = {METADATA: key} if saga is None else {METADATA: key, SAGA_METADATA: saga}
        try:
            written = self.clients.s3.put_object(
                Bucket=bucket,
                Key=object_key,
                Body=body.encode(),
                ContentType=content_type,
                Metadata=metadata,
                IfNoneMatch="*",
            )
        except Exception as failure:
            if error_code(failure) not in ("PreconditionFailed", "412"):
                raise one_line(f"s3 put-object s3://{bucket}/{object_key}", failure) from None
            there = self.head(bucket, object_key)
            if there is None or there["key"] != key:
                problem = f"s3 put-object s3://{bucket}/{object_key}: it already exists"
                raise AwsError(problem) from None
            return {**result, "etag": there["etag"], "version_id": there["version_id"]}
        return {**result, "etag": written.get("ETag"), "version_id": written.get("VersionId")}

    def delete_object(self, bucket: str, object_key: str, key: str) -> None:
        """Delete the object the step with ``key`` wrote (gone: done; someone else's: raise)."""
        there = self.head(bucket, object_key)
        if there is None:
            return
        if there["key"] != key:
            raise AwsError(f"s3 delete-object s3://{bucket}/{object_key}: not this step's object")
        options: dict[str, Any] = {}
        if there["version_id"] and there["version_id"] != "null":
            options["VersionId"] = there["version_id"]
        try:
            self.clients.s3.delete_object(Bucket=bucket, Key=object_key, **options)
        except Exception as failure:
            raise one_line(f"s3 delete-object s3://{bucket}/{object_key}", failure) from None

    def objects(self, bucket: str) -> list[str]:
        """Every object key in ``bucket``."""
        names: list[str] = []
        for page in self.clients.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            names.extend(item["Key"] for item in page.get("Contents", []))
        return sorted(names)
