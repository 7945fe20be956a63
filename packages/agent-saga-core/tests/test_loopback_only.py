"""The network guard that adapter tests run under: only this machine is reachable."""

from __future__ import annotations

import socket

import pytest
from agent_saga.testing import NetworkRefused, loopback_only


def test_remote_connections_and_lookups_fail_and_are_listed() -> None:
    with loopback_only() as refused:
        with pytest.raises(NetworkRefused), socket.socket() as sock:
            sock.connect(("192.0.2.1", 443))
        with pytest.raises(NetworkRefused):
            socket.getaddrinfo("api.openai.com", 443)
    assert refused == ["192.0.2.1", "api.openai.com"]


def test_loopback_still_works_and_the_guard_is_removed_after() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        with loopback_only() as refused, socket.create_connection(("127.0.0.1", port)):
            pass
        assert refused == []
    assert socket.socket.connect is not None
    assert socket.getaddrinfo.__module__ == "socket"
