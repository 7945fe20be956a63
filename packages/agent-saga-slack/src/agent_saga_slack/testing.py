"""Test doubles for Slack: a local mock of the Web API and requests signed like Slack's.

:class:`MockSlackAPI` is a small stdlib HTTP server on 127.0.0.1 that answers the Web API
methods the approvals app uses (``auth.test``, ``oauth.v2.access``, ``chat.postMessage``,
``chat.update``) and records every call, including POSTs to response URLs (``/resp/...``).
Point a :class:`slack_sdk.WebClient` at ``mock.api_url``. With ``token_lifetime`` set it
behaves like an app with token rotation on: an install hands out an expiring ``xoxe.xoxb-``
token and a single-use refresh token, ``oauth.v2.access`` with ``grant_type=refresh_token``
exchanges them, and a call with an expired token is answered ``token_expired``. The
``signed_*`` helpers build request bodies and headers signed with
:class:`slack_sdk.signature.SignatureVerifier`, so the real slack-bolt app verifies them as it
verifies Slack's.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode

from slack_sdk.signature import SignatureVerifier

BOT_TOKEN = "xoxb-from-oauth"  # noqa: S105 - a fake token the mock hands out
_BODY_LIMIT = 1_000_000
_GRACE = 1.0  # the SDK stores a whole-second expiry: the mock refuses no earlier than it
_NO_AUTH = ("oauth.v2.access",)


@dataclass(frozen=True)
class Call:
    """One request the mock received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def method(self) -> str:
        """The Web API method (``chat.update``) or the path for anything else."""
        return self.path.removeprefix("/api/").lstrip("/")


@dataclass
class MockSlackAPI:
    """A mock Slack Web API on 127.0.0.1 (use as a context manager).

    Args:
        team_id: the workspace every token belongs to.
        token_lifetime: seconds an installed or refreshed token lives (``expires_in``);
            ``None``: installs get the non-expiring :data:`BOT_TOKEN` (rotation off).
        client_secret: if set, ``oauth.v2.access`` refuses other client credentials.
        refused_tokens: tokens answered ``invalid_auth`` (a revoked or mistyped token).
    """

    team_id: str = "T1"
    token_lifetime: int | None = None
    client_secret: str | None = None
    refused_tokens: set[str] = field(default_factory=set)
    calls: list[Call] = field(default_factory=list)
    expiry: dict[str, float] = field(default_factory=dict)
    """Each rotating access token the mock issued (in order) and when it stops working."""
    _refresh_tokens: set[str] = field(default_factory=set)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _ts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> MockSlackAPI:
        mock = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = min(int(self.headers.get("content-length") or 0), _BODY_LIMIT)
                raw = self.rfile.read(length).decode("utf-8", "replace")
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, answer = mock._answer(self.path, headers, raw)
                data = answer.encode()
                self.send_response(status)
                kind = "application/json" if answer.startswith("{") else "text/plain"
                self.send_header("content-type", f"{kind}; charset=utf-8")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # quiet
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        assert self._server is not None, "use MockSlackAPI as a context manager"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def api_url(self) -> str:
        """The base URL to give ``WebClient(base_url=...)``."""
        return self.url + "/api/"

    def response_url(self, name: str = "1") -> str:
        return f"{self.url}/resp/{name}"

    def calls_to(self, method: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.method == method]

    def expired(self, token: str) -> bool:
        """Whether the mock now answers ``token_expired`` to ``token``."""
        with self._lock:
            return token in self.expiry and time.time() >= self.expiry[token]

    def wait_expired(self, token: str, timeout: float = 30.0) -> None:
        """Return once ``token`` has expired (fails after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while not self.expired(token):
            assert time.monotonic() < deadline, f"{token} did not expire"
            time.sleep(0.02)

    def expire_tokens(self) -> None:
        """Make every access token issued so far expire now (revoked before its time)."""
        with self._lock:
            now = time.time()
            self.expiry.update(dict.fromkeys(self.expiry, now))

    def wait_for(self, method: str, count: int = 1, timeout: float = 10.0) -> list[Call]:
        """The calls to ``method`` once there are at least ``count`` (fails after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.calls_to(method)
            if len(found) >= count:
                return found
            time.sleep(0.01)
        raise AssertionError(f"{count} call(s) to {method} expected, got {self.calls_to(method)}")

    def _answer(self, path: str, headers: dict[str, str], raw: str) -> tuple[int, str]:
        if headers.get("content-type", "").startswith("application/json"):
            body = json.loads(raw or "{}")
        else:
            body = {k: v[0] for k, v in parse_qs(raw).items()}
        with self._lock:
            self.calls.append(Call(path, headers, body))
            self._ts += 1
            ts = f"1700000000.{self._ts:06d}"
        if path.startswith("/resp/"):
            return 200, "ok"
        method = path.removeprefix("/api/")
        if method == "oauth.v2.access":
            return 200, json.dumps(self._oauth(headers, body))
        refusal = self._token_problem(headers, body)
        if refusal is not None:
            return 200, json.dumps({"ok": False, "error": refusal})
        answers: dict[str, dict[str, Any]] = {
            "auth.test": {
                "ok": True,
                "url": "https://example.invalid/",
                "team": "Test",
                "user": "saga-bot",
                "team_id": self.team_id,
                "user_id": "UBOT",
                "bot_id": "BBOT",
                "is_enterprise_install": False,
            },
            "chat.postMessage": {"ok": True, "channel": body.get("channel"), "ts": ts},
            "chat.update": {"ok": True, "channel": body.get("channel"), "ts": body.get("ts")},
        }
        return 200, json.dumps(answers.get(method, {"ok": False, "error": "unknown_method"}))

    def _token_problem(self, headers: dict[str, str], body: dict[str, Any]) -> str | None:
        auth = headers.get("authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else body.get("token")
        if not token:
            return "not_authed"
        if token in self.refused_tokens:
            return "invalid_auth"
        with self._lock:
            if token in self.expiry:
                return "token_expired" if time.time() >= self.expiry[token] else None
        return "invalid_auth" if str(token).startswith("xoxe.") else None

    def _oauth(self, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
        if self.client_secret is not None and not _basic_secret(headers, self.client_secret):
            return {"ok": False, "error": "bad_client_secret"}
        refreshing = body.get("grant_type") == "refresh_token"
        if refreshing or self.token_lifetime is not None:
            return self._issue(body.get("refresh_token") if refreshing else None)
        return {
            "ok": True,
            "app_id": "A1",
            "authed_user": {"id": "UINSTALLER"},
            "scope": "chat:write,commands",
            "token_type": "bot",
            "access_token": BOT_TOKEN,
            "bot_user_id": "UBOT",
            "team": {"id": self.team_id, "name": "Test"},
            "enterprise": None,
            "is_enterprise_install": False,
        }

    def _issue(self, spent: str | None) -> dict[str, Any]:
        """A new expiring token and refresh token; ``spent`` is revoked (refresh tokens are
        single use)."""
        lifetime = self.token_lifetime if self.token_lifetime is not None else 43_200
        with self._lock:
            if spent is not None:
                if spent not in self._refresh_tokens:
                    return {"ok": False, "error": "invalid_refresh_token"}
                self._refresh_tokens.discard(spent)
            number = len(self.expiry) + 1
            token, refresh = f"xoxe.xoxb-1-mock{number}", f"xoxe-1-refresh{number}"
            self.expiry[token] = time.time() + lifetime + _GRACE
            self._refresh_tokens.add(refresh)
        answer: dict[str, Any] = {
            "ok": True,
            "app_id": "A1",
            "scope": "chat:write,commands",
            "token_type": "bot",
            "access_token": token,
            "refresh_token": refresh,
            "expires_in": lifetime,
            "bot_user_id": "UBOT",
            "team": {"id": self.team_id, "name": "Test"},
            "enterprise": None,
            "is_enterprise_install": False,
        }
        if spent is None:
            answer["authed_user"] = {"id": "UINSTALLER"}
        return answer


def _basic_secret(headers: dict[str, str], secret: str) -> bool:
    auth = headers.get("authorization", "")
    if not auth.startswith("Basic "):
        return False
    decoded = base64.b64decode(auth.removeprefix("Basic ")).decode("utf-8", "replace")
    return decoded.partition(":")[2] == secret


def signed_headers(secret: str, body: str, timestamp: int | None = None) -> dict[str, str]:
    """Headers Slack would send with ``body``: content type, timestamp and v0 signature."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    assert signature is not None
    return {
        "content-type": "application/x-www-form-urlencoded",
        "x-slack-request-timestamp": ts,
        "x-slack-signature": signature,
    }


def button_body(
    request_id: str,
    *,
    user: str,
    team: str = "T1",
    approve: bool = True,
    response_url: str = "",
) -> str:
    """The form body of a click on a request message's Approve (or Deny) button."""
    action = "agent_saga_approve" if approve else "agent_saga_deny"
    payload = {
        "type": "block_actions",
        "team": {"id": team, "domain": "test"},
        "user": {"id": user, "team_id": team},
        "api_app_id": "A1",
        "token": "legacy-unused",
        "container": {"type": "message", "channel_id": "C1", "message_ts": "1700000000.000001"},
        "channel": {"id": "C1"},
        "trigger_id": "1.2.3",
        "response_url": response_url,
        "actions": [
            {
                "type": "button",
                "action_id": action,
                "block_id": "agent_saga_decision",
                "value": request_id,
                "action_ts": str(time.time()),
            }
        ],
    }
    return urlencode({"payload": json.dumps(payload)})


def command_body(
    text: str,
    *,
    user: str,
    team: str = "T1",
    response_url: str = "",
    command: str = "/saga-approve",
) -> str:
    """The form body of a slash command."""
    return urlencode(
        {
            "token": "legacy-unused",
            "team_id": team,
            "team_domain": "test",
            "channel_id": "C1",
            "channel_name": "approvals",
            "user_id": user,
            "user_name": user.lower(),
            "command": command,
            "text": text,
            "api_app_id": "A1",
            "response_url": response_url,
            "trigger_id": "1.2.3",
        }
    )
