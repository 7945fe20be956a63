"""Hostile JSON-RPC lines on the gateway's stdio pipe.

What the log records of a call must be what the upstream received. JSON has no NaN, no
Infinity and no number beyond a 64-bit float's range; Python's json reads them all, as
``float('nan')`` and ``float('inf')``, which the log cannot hold (it keeps a ``$repr`` of them)
and the wire writes as ``null``. Such a line is refused as a parse error before anything runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.types.version import LATEST_MODERN_VERSION
from mcp_testkit import START_TIMEOUT, saga_records
from test_relay import CONFIG, RawClient, _end, _start, _stop

KEEP = CONFIG + """
[upstreams.probe.tools.keep]
semantics = "reversible"
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawClient]:
    client = _start(tmp_path_factory.mktemp("hostile"), template=KEEP)
    try:
        yield client
    finally:
        _stop(client)


def _call_line(request_id: int, value: str) -> bytes:
    params = '{"name": "keep", "arguments": {"value": %s}}' % value
    return b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": %s}\n' % (
        request_id,
        params.encode(),
    )


def _kept_args(home: Path) -> list[object]:
    found = []
    for records in saga_records(home).values():
        for record in records:
            if record.kind == "step.intent" and record.data.get("tool") == "keep":
                found.append(record.data.get("args"))
    return found


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400", "[1, -1E999]"])
def test_a_number_json_does_not_have_is_a_parse_error_and_nothing_runs(
    gateway: RawClient, value: str
) -> None:
    before = len(gateway.probe.ops("keep")), len(_kept_args(gateway.home))
    gateway.write(_call_line(7, value))
    answer = gateway.receive()
    assert answer["id"] is None, answer
    assert answer["error"]["code"] == -32700
    assert "not a JSON number" in answer["error"]["message"]
    assert gateway.request("ping")["result"] == {}
    assert (len(gateway.probe.ops("keep")), len(_kept_args(gateway.home))) == before


def test_integers_beyond_64_bits_reach_the_upstream_and_the_log_exactly(
    gateway: RawClient,
) -> None:
    big = [2**64 + 1, -(2**70), 2**63, 10**30]
    gateway.write(_call_line(8, str(big)))
    answer = gateway.receive()
    assert answer["result"]["isError"] is False, answer
    assert gateway.probe.ops("keep")[-1]["value"] == big
    gateway.call(11, "create_issue", title="a durable step: the reversible one before is written")
    assert "result" in gateway.receive()
    assert {"value": big} in _kept_args(gateway.home)


def test_a_lone_surrogate_in_a_method_name_is_a_parse_error_and_the_session_goes_on(
    gateway: RawClient,
) -> None:
    gateway.write(b'{"jsonrpc": "2.0", "id": 9, "method": "tools/\\ud800"}\n')
    answer = gateway.receive()  # the gateway used to exit: the answer naming it had no UTF-8
    assert answer["id"] is None, answer
    assert answer["error"]["code"] == -32700
    assert "lone UTF-16 surrogate" in answer["error"]["message"]
    assert gateway.request("ping")["result"] == {}


def test_a_lone_surrogate_in_arguments_is_refused_before_the_upstream_runs(
    gateway: RawClient,
) -> None:
    before = len(gateway.probe.ops("keep"))
    gateway.write(_call_line(10, '"half \\udc00 a pair"'))
    answer = gateway.receive()
    assert answer["id"] in (None, 10), answer
    assert gateway.request("ping")["result"] == {}
    assert len(gateway.probe.ops("keep")) == before


def test_the_sdk_served_era_refuses_nan_in_arguments_too(tmp_path: Path) -> None:
    """A 2026-era client is served by the SDK's server, whose parser reads NaN: the gateway
    refuses the call itself."""
    client = _start(tmp_path, template=KEEP, handshake=False)
    meta = {
        "io.modelcontextprotocol/protocolVersion": LATEST_MODERN_VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    try:
        client.send({"id": 1, "method": "server/discover", "params": {"_meta": meta}})
        assert "result" in client.receive(START_TIMEOUT * 2)
        for request_id, value in enumerate(["NaN", "-1e400"], start=2):
            line = _call_line(request_id, value)
            client.write(line.replace(b'"arguments"', b'"_meta": %s, "arguments"' % (
                json.dumps(meta).encode()
            )))
            answer = client.receive()
            assert answer["id"] == request_id, answer
            assert answer["result"]["isError"] is True, answer
            assert "Invalid arguments for keep" in answer["result"]["content"][0]["text"]
    finally:
        code = _end(client)
    assert code == 0
    assert client.probe.ops("keep") == []
    assert _kept_args(client.home) == []
