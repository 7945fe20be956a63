"""Test doubles for Slack: a local mock of the Web API and requests signed like Slack's.

:class:`MockSlackAPI` is a small stdlib HTTP server on 127.0.0.1 that answers the Web API
methods the approvals app uses (``auth.test``, ``oauth.v2.access``, ``chat.postMessage``,
``chat.update``) and records every call, including POSTs to response URLs (``/resp/...``).
Point a :class:`slack_sdk.WebClient` at ``mock.api_url``. The ``signed_*`` helpers build request
bodies and headers signed with :class:`slack_sdk.signature.SignatureVerifier`, so the real
slack-bolt app verifies them as it verifies Slack's.
"""

from __future__ import annotations

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
    """A mock Slack Web API on 127.0.0.1 (use as a context manager)."""

    team_id: str = "T1"
    calls: list[Call] = field(default_factory=list)
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
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
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
            "oauth.v2.access": {
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
            },
            "chat.postMessage": {"ok": True, "channel": body.get("channel"), "ts": ts},
            "chat.update": {"ok": True, "channel": body.get("channel"), "ts": body.get("ts")},
        }
        return 200, json.dumps(answers.get(method, {"ok": False, "error": "unknown_method"}))


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
