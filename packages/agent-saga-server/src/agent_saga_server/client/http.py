"""Talking to the control plane: one small wrapper over an ``httpx.Client`` per user.

Errors come out as two types: :class:`ServerUnreachable` (no answer: connection refused, a
timeout, a broken stream) and :class:`ServerRefused` (an answer with a 4xx/5xx status and the
server's one-line ``detail``).
"""

from __future__ import annotations

from typing import Any

import httpx


class ServerError(Exception):
    """Base of the client's errors."""


class ServerUnreachable(ServerError, ConnectionError):
    """The control plane did not answer."""


class ServerRefused(ServerError):
    """The control plane answered with an error status."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


def redact_url(url: str) -> str:
    return url.split("?", maxsplit=1)[0]


class ServerClient:
    """Requests to one control plane with one token. Thread-safe (httpx's pool)."""

    def __init__(self, url: str, token: str, *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "agent-saga-client"},
            timeout=timeout,
            trust_env=False,
        )

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """The decoded JSON answer (``None`` for 204).

        Raises:
            ServerUnreachable: no answer.
            ServerRefused: an error status.
        """
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ServerUnreachable(f"{self.url} did not answer: {exc}") from exc
        if response.status_code >= 400:
            try:
                detail = str(response.json().get("detail", response.text))
            except ValueError:
                detail = response.text[:200]
            raise ServerRefused(response.status_code, detail)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any, **kwargs: Any) -> Any:
        return self.request("POST", path, json=body, **kwargs)

    @property
    def raw(self) -> httpx.Client:
        return self._client

    def close(self) -> None:
        self._client.close()


__all__ = ["ServerClient", "ServerError", "ServerRefused", "ServerUnreachable", "redact_url"]
