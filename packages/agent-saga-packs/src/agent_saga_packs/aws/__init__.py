"""Cloud resources: EC2 instances, S3 buckets and objects, IAM roles, each undone on failure.

boto3 (``pip install 'agent-saga-packs[aws]'``) is imported when the first client is built.
"""

from ._clients import METADATA, SAGA_METADATA, SAGA_TAG, TAG, AwsClients, AwsError
from ._iam import attach_saga_tag, attach_tag
from ._pack import ADMIN_POLICIES, AwsPack, aws_rules

__all__ = [
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
]
