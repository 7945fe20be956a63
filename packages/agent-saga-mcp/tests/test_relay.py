"""The stdio relay at the message level: a test client writes JSON-RPC lines to the gateway's
stdin and reads its stdout, as an MCP client does, including lines no SDK client would send.

The gateway (one subprocess for the module, with a 64 KiB message limit) fronts an issue
tracker and a ``probe`` server (echo, wait, exit mid-call, keep: record any value as received),
both stdio upstreams with ledgers outside their processes. What the log records of a call must
be what the upstream received: a value JSON has no place for (NaN, Infinity, a lone surrogate)
is refused before either sees it. The last tests run gateways of their own: one whose probe upstream
dies, one whose client speaks the 2026 protocol era (handed to the SDK's server).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from agent_saga_mcp._relay import CALLS_LIMIT
from mcp.types.version import LATEST_MODERN_VERSION
from mcp_testkit import (
    AGENT_SAGA,
    START_TIMEOUT,
    Ledger,
    saga_end,
    saga_records,
    stdio_upstream,
    step_sagas,
    stop_process,
)

LIMIT = 64 * 1024

CONFIG = """
[upstreams.issues]
{issues}

[upstreams.issues.tools.create_issue]
compensate = {{ tool = "close_issue", arguments = {{ number = "result.number" }} }}

[upstreams.probe]
{probe}

[upstreams.probe.tools.echo]
semantics = "reversible"

[upstreams.probe.tools.wait]
semantics = "reversible"

[upstreams.probe.tools.die]
semantics = "reversible"

[upstreams.probe.tools.keep]
semantics = "reversible"
"""


@dataclass
class RawClient:
    """The gateway's process, spoken to line by line."""

    process: subprocess.Popen[bytes]
    home: Path
    issues: Ledger
    probe: Ledger
    buffer: bytes = b""
    next_id: int = field(default=1000)

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

    def call(self, request_id: Any, tool: str, **arguments: Any) -> None:
        params = {"name": tool, "arguments": arguments}
        self.send({"id": request_id, "method": "tools/call", "params": params})

    def receive(self, timeout: float = 60.0) -> dict[str, Any]:
        """The next message the gateway writes (a test failure after ``timeout`` seconds)."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                pytest.fail(f"the gateway said nothing within {timeout} s")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                pytest.fail(f"the gateway closed its output (exit {self.process.poll()})")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        answer = self.receive()
        assert answer["id"] == self.next_id, answer
        return answer


def _start(
    root: Path, limit: int = LIMIT, template: str = CONFIG, *, handshake: bool = True
) -> RawClient:
    issues, probe = Ledger(root / "issues.jsonl"), Ledger(root / "probe.jsonl")
    config = root / "gateway.toml"
    config.write_text(
        template.format(
            issues=stdio_upstream("issues", issues.path),
            probe=stdio_upstream("probe", probe.path),
        )
    )
    home = root / "home"
    with (root / "gateway.err").open("w") as err:
        process = subprocess.Popen(
            [
                *(AGENT_SAGA, "--home", str(home), "mcp", "serve", "--config", str(config)),
                *("--max-message-bytes", str(limit)),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    client = RawClient(process, home, issues, probe)
    if not handshake:
        return client
    init = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    }
    client.send({"id": 0, "method": "initialize", "params": init})
    answer = client.receive(START_TIMEOUT * 2)
    assert answer["id"] == 0
    assert answer["result"]["protocolVersion"] == "2025-06-18"
    client.send({"method": "notifications/initialized"})
    return client


def _end(client: RawClient) -> int:
    """Close the gateway's stdin (a clean end of the session); its exit code."""
    assert client.process.stdin is not None
    client.process.stdin.close()
    try:
        return client.process.wait(timeout=60)
    finally:
        _stop(client)


def _stop(client: RawClient) -> None:
    if client.process.stdin is not None and not client.process.stdin.closed:
        client.process.stdin.close()
    stop_process(client.process)  # type: ignore[arg-type]


def _eventually(check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"{check} was still false after {timeout} s")


def keep_line(request_id: int, value: str) -> bytes:
    """A ``tools/call`` of ``keep`` whose argument is ``value``, JSON text written as given."""
    params = f'{{"name": "keep", "arguments": {{"value": {value}}}}}'
    line = f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", "params": {params}}}'
    return line.encode() + b"\n"


def kept_args(home: Path) -> list[object]:
    """The arguments the log records for each ``keep`` step."""
    found: list[object] = []
    for records in saga_records(home).values():
        for record in records:
            if record.kind == "step.intent" and record.data.get("tool") == "keep":
                found.append(record.data.get("args"))
    return found


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawClient]:
    client = _start(tmp_path_factory.mktemp("relay"))
    try:
        yield client
    finally:
        _stop(client)


def test_a_line_that_is_not_json_is_a_parse_error_and_the_session_goes_on(
    gateway: RawClient,
) -> None:
    gateway.write(b'{"jsonrpc": "2.0", "id": 5, "method": \n')
    answer = gateway.receive()
    assert answer["id"] is None
    assert answer["error"]["code"] == -32700
    gateway.write(b"[" * 50_000 + b"\n")  # nested too deep for a parser's recursion
    assert gateway.receive()["error"]["code"] == -32700
    gateway.write(b"[1, 2]\n")
    assert gateway.receive()["error"]["code"] == -32600
    gateway.send({"id": True, "method": "ping"})  # a bool is not an id
    assert gateway.receive()["error"] == {
        "code": -32600,
        "message": "Invalid request: an id is a string or an integer",
    }
    assert gateway.request("ping")["result"] == {}
    unknown = gateway.request("resources/list")
    assert unknown["error"]["code"] == -32601
    bad = gateway.request("tools/call", {"arguments": {}})
    assert bad["error"]["code"] == -32602
    assert "name" in bad["error"]["message"]


def test_a_line_over_the_limit_is_dropped_unread_with_an_error(gateway: RawClient) -> None:
    huge = "x" * (LIMIT * 3)
    gateway.call(40, "echo", text=huge)
    answer = gateway.receive()
    assert answer["id"] is None
    assert answer["error"]["code"] == -32600
    assert f"over the limit of {LIMIT} bytes" in answer["error"]["message"]
    gateway.call(41, "echo", text="after the huge line")
    after = gateway.receive()
    assert after["id"] == 41
    assert after["result"]["content"][0]["text"] == "after the huge line"
    assert [e["text"] for e in gateway.probe.ops("echo")] == ["after the huge line"]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400", "[1, -1E999]"])
def test_a_number_json_does_not_have_is_a_parse_error_and_nothing_runs(
    gateway: RawClient, value: str
) -> None:
    """Python's json reads these as float NaN and infinities: the log could keep only a $repr
    of them and the upstream would get null, so the line is refused before anything runs."""
    before = len(gateway.probe.ops("keep")), len(kept_args(gateway.home))
    gateway.write(keep_line(7, value))
    answer = gateway.receive()
    assert answer["id"] is None, answer
    assert answer["error"]["code"] == -32700
    assert "not a JSON number" in answer["error"]["message"]
    assert gateway.request("ping")["result"] == {}
    assert (len(gateway.probe.ops("keep")), len(kept_args(gateway.home))) == before


def test_a_lone_surrogate_is_a_parse_error_and_the_session_goes_on(gateway: RawClient) -> None:
    before = len(gateway.probe.ops("keep"))
    for line in (
        b'{"jsonrpc": "2.0", "id": 9, "method": "tools/\\ud800"}\n',  # the gateway exited
        keep_line(10, '"half \\udc00 a pair"'),
    ):
        gateway.write(line)
        answer = gateway.receive()
        assert answer["id"] is None, answer
        assert answer["error"]["code"] == -32700
        assert "lone UTF-16 surrogate" in answer["error"]["message"]
    assert gateway.request("ping")["result"] == {}
    assert len(gateway.probe.ops("keep")) == before


def test_integers_beyond_64_bits_reach_the_upstream_and_the_log_exactly(
    gateway: RawClient,
) -> None:
    big = [2**64 + 1, -(2**70), 2**63, 10**30]
    gateway.write(keep_line(8, str(big)))
    assert gateway.receive()["result"]["isError"] is False
    assert gateway.probe.ops("keep")[-1]["value"] == big
    gateway.call(11, "create_issue", title="a durable step: the reversible one before is written")
    assert "result" in gateway.receive()
    assert {"value": big} in kept_args(gateway.home)


def test_a_request_id_in_use_by_a_call_in_progress_is_refused(gateway: RawClient) -> None:
    gateway.call(20, "wait", seconds=2.0, label="slow")
    _eventually(lambda: [e for e in gateway.probe.ops("wait_started") if e["label"] == "slow"])
    gateway.call(20, "echo", text="same id")
    gateway.call("20", "echo", text="string id")  # another id: "20" is not 20
    answers = [gateway.receive() for _ in range(3)]
    refused = [a for a in answers if "error" in a]
    assert refused == [
        {
            "jsonrpc": "2.0",
            "id": 20,
            "error": {
                "code": -32600,
                "message": "Invalid request: id 20 is in use by a call in progress",
            },
        }
    ]
    results = {a["id"]: a["result"]["content"][0]["text"] for a in answers if "result" in a}
    assert results == {"20": "string id", 20: "waited slow"}
    assert "same id" not in [e["text"] for e in gateway.probe.ops("echo")]


def test_calls_beyond_the_limit_in_progress_are_refused_and_the_rest_run(
    gateway: RawClient,
) -> None:
    """A client that sends calls faster than they run cannot make the gateway hold them all."""
    gateway.call(50, "wait", seconds=120.0, label="holds the session")
    _eventually(lambda: [e for e in gateway.probe.ops("wait_started") if "holds" in e["label"]])
    extra = 5
    burst = [f"burst {n}" for n in range(CALLS_LIMIT - 1 + extra)]
    gateway.write(b"".join(
        json.dumps({"jsonrpc": "2.0", "id": 100 + n, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": text}}}).encode() + b"\n"
        for n, text in enumerate(burst)
    ))  # fmt: skip
    refused = [gateway.receive() for _ in range(extra)]
    assert [a["id"] for a in refused] == list(range(100 + CALLS_LIMIT - 1, 100 + len(burst)))
    assert all("Too many calls in progress" in a["error"]["message"] for a in refused)
    cancel = {"requestId": 50, "reason": "enough"}
    gateway.send({"method": "notifications/cancelled", "params": cancel})
    answered = {a["id"]: a for a in (gateway.receive() for _ in range(CALLS_LIMIT - 1))}
    assert sorted(answered) == list(range(100, 100 + CALLS_LIMIT - 1))
    echoed = [e["text"] for e in gateway.probe.ops("echo")]
    assert [t for t in echoed if t.startswith("burst")] == burst[: CALLS_LIMIT - 1]
    assert gateway.request("ping")["result"] == {}


def test_a_cancelled_call_is_cancelled_upstream_rolled_back_and_not_answered(
    gateway: RawClient,
) -> None:
    gateway.call(30, "wait", seconds=120.0, label="cancelled")
    _eventually(lambda: [e for e in gateway.probe.ops("wait_started") if e["label"] == "cancelled"])
    cancel = {"requestId": 30, "reason": "the user pressed stop"}
    gateway.send({"method": "notifications/cancelled", "params": cancel})
    gateway.call(31, "echo", text="next")
    answer = gateway.receive()
    assert answer["id"] == 31  # nothing for 30, before or after
    assert answer["result"]["content"][0]["text"] == "next"
    _eventually(lambda: gateway.probe.ops("wait_cancelled"))
    assert "cancelled" not in [e["label"] for e in gateway.probe.ops("wait_done")]
    [saga] = step_sagas(gateway.home, "wait", label="cancelled")
    end = _eventually(lambda: saga_end(saga_records(gateway.home)[saga]))
    assert end["status"] == "rolled_back"
    assert gateway.request("ping")["result"] == {}


def test_an_upstream_that_dies_mid_call_fails_the_call_and_the_saga_is_undone(
    tmp_path: Path,
) -> None:
    client = _start(tmp_path)
    try:
        client.call(1, "create_issue", title="before the crash")
        made = client.receive()
        assert made["result"]["structuredContent"] == {"number": 1, "title": "before the crash"}
        client.call(2, "die")
        died = client.receive()
        assert died["id"] == 2
        result = died["result"]
        assert result["isError"] is True
        text = result["content"][0]["text"]
        assert "die failed: UpstreamError: upstream 'probe' closed its output" in text
        assert "compensated #1 create_issue" in text
        assert [c["number"] for c in client.issues.ops("close_issue")] == [1]
        client.call(3, "echo", text="to a dead upstream")
        later = client.receive()["result"]
        assert later["isError"] is True
        assert "upstream 'probe' closed its output" in later["content"][0]["text"]
        assert client.request("ping")["result"] == {}
        assert len(client.probe.ops("die")) == 1
    finally:
        code = _end(client)
    assert code == 0


def test_a_client_of_the_2026_era_is_handed_to_the_sdk_and_served(tmp_path: Path) -> None:
    client = _start(tmp_path, handshake=False)
    home, probe = client.home, client.probe
    meta = {  # the 2026 per-request envelope (no initialize handshake)
        "io.modelcontextprotocol/protocolVersion": LATEST_MODERN_VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    try:
        client.send({"id": 1, "method": "server/discover", "params": {"_meta": meta}})
        discovered = client.receive(START_TIMEOUT * 2)
        assert discovered["result"]["supportedVersions"] == [LATEST_MODERN_VERSION]
        call = {"name": "echo", "arguments": {"text": "modern"}, "_meta": meta}
        client.send({"id": 2, "method": "tools/call", "params": call})
        echoed = client.receive()
        assert echoed["id"] == 2
        assert echoed["result"]["structuredContent"] == {"result": "modern"}
        assert echoed["result"]["resultType"] == "complete"
        # The SDK's parser reads NaN and Infinity (the relay's refuses them): the gateway
        # refuses such arguments itself, before the log or the upstream sees them.
        enveloped = b'"_meta": %s, "arguments"' % json.dumps(meta).encode()
        for request_id, value in enumerate(["NaN", "-1e400"], start=3):
            client.write(keep_line(request_id, value).replace(b'"arguments"', enveloped))
            answer = client.receive()
            assert answer["id"] == request_id, answer
            assert answer["result"]["isError"] is True, answer
            assert "Invalid arguments for keep" in answer["result"]["content"][0]["text"]
    finally:
        code = _end(client)
    assert code == 0
    assert [e["text"] for e in probe.ops("echo")] == ["modern"]
    assert probe.ops("keep") == []
    assert kept_args(home) == []
    [saga] = step_sagas(home, "echo", text="modern")
    assert (saga_end(saga_records(home)[saga]) or {}).get("status") == "committed"
