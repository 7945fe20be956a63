"""boto3 clients for the AWS pack, one set per process, and one-line errors."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._per_process import PerProcess

if TYPE_CHECKING:
    import boto3
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_iam import IAMClient
    from mypy_boto3_s3 import S3Client

TAG = "agent-saga:idempotency-key"
"""The tag (EC2, S3 bucket, IAM role) that names the step that made a resource."""
METADATA = "agent-saga-key"
"""The S3 object metadata entry (``x-amz-meta-agent-saga-key``) that does the same."""
SAGA_TAG = "agent-saga:saga"
"""The tag (S3 bucket, IAM role) with the mark of the saga that made it."""
SAGA_METADATA = "agent-saga-saga"
"""The S3 object metadata entry with the mark of the saga that wrote it."""


class AwsError(Exception):
    """An AWS call failed, or a resource is not the one the step made; one line."""


def error_code(failure: BaseException) -> str:
    """The AWS error code of a botocore ``ClientError`` (``""`` for anything else)."""
    response: Any = getattr(failure, "response", None)
    if not isinstance(response, dict):
        return ""
    return str(response.get("Error", {}).get("Code", ""))


def one_line(action: str, failure: BaseException) -> AwsError:
    response: Any = getattr(failure, "response", None)
    message = str(failure)
    if isinstance(response, dict):
        found = response.get("Error", {})
        message = f"{found.get('Code', '?')}: {found.get('Message', '')}".rstrip(": ")
    return AwsError(f"{action}: {message}")


class AwsClients:
    """EC2, S3 and IAM clients built from one boto3 session, per process.

    Args:
        region: the region (default: the session's).
        endpoint_url: an endpoint for every service (a local stand-in such as moto's server);
            ``None`` for AWS itself.
        session: builds the ``boto3.Session`` (default: ``boto3.Session()``, which reads the
            usual environment and profile).
        client_options: passed to each ``session.client(...)`` (``config=...``).
    """

    def __init__(
        self,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        session: Callable[[], boto3.Session] | None = None,
        **client_options: Any,
    ) -> None:
        self.region = region
        self.endpoint_url = endpoint_url
        self._make_session = session
        self._session: boto3.Session | None = None
        self._session_lock = threading.Lock()
        _ALIVE.add(self)
        self._options = client_options
        self._ec2: PerProcess[EC2Client] = PerProcess(lambda: self._client("ec2"))
        self._s3: PerProcess[S3Client] = PerProcess(lambda: self._client("s3"))
        self._iam: PerProcess[IAMClient] = PerProcess(lambda: self._client("iam"))

    def __repr__(self) -> str:
        return f"AwsClients(region={self.region!r}, endpoint_url={self.endpoint_url!r})"

    def session(self) -> boto3.Session:
        """The boto3 session, built once. Sessions hold credentials and loaded service models,
        no connection, so a forked child may reuse its parent's; clients are per process.

        The lock that guards the building is replaced in a forked child (a thread of the
        parent may have held it at the fork, and that thread does not exist in the child)."""
        with self._session_lock:
            if self._session is None:
                import boto3

                self._session = self._make_session() if self._make_session else boto3.Session()
            return self._session

    def _client(self, service: str) -> Any:
        session = self.session()
        options: dict[str, Any] = dict(self._options)
        if self.region is not None:
            options["region_name"] = self.region
        if self.endpoint_url is not None:
            options["endpoint_url"] = self.endpoint_url
        return session.client(service, **options)  # type: ignore[call-overload]

    @property
    def ec2(self) -> EC2Client:
        return self._ec2.get()

    @property
    def s3(self) -> S3Client:
        return self._s3.get()

    @property
    def iam(self) -> IAMClient:
        return self._iam.get()

    @property
    def region_name(self) -> str:
        """The region the clients use."""
        return str(self.s3.meta.region_name)


_ALIVE: weakref.WeakSet[AwsClients] = weakref.WeakSet()
"""Every :class:`AwsClients` of this process, for :func:`_renew_locks_in_child`."""


def _renew_locks_in_child() -> None:
    for clients in list(_ALIVE):
        clients._session_lock = threading.Lock()


os.register_at_fork(after_in_child=_renew_locks_in_child)
