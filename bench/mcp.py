"""What the MCP gateway adds to a tool call, against calling the upstream directly, same run.

Each run starts, over stdio, an upstream MCP server (``mcp_upstream/server.py``) for direct
calls, a bare MCP proxy (``mcp_upstream/proxy.py``: forwards, nothing else) in front of its own
copy of it, and the gateway (``agent-saga mcp serve``, its home in a temporary directory) in
front of a third copy. A real ``mcp.ClientSession`` times, in alternating rounds:

  * the floor: ``read`` straight to the upstream;
  * ``read`` through the bare proxy: what one more MCP hop costs on this SDK, whatever it does;
  * a REVERSIBLE call through the gateway (``read``: gate, buffered intent and outcome);
  * a COMPENSABLE call through the gateway (``put``: gate, intent fsynced before the call).

The gateway serves this stdio client through its message-level relay and holds its stdio
upstream as a raw JSON-RPC link (no SDK session in the middle process); the bare proxy keeps
the SDK's sessions on both sides, as any proxy built on the SDK does.

Then, in process, the gateway's own work per call with no MCP on either side (its handler in
front of an upstream that answers at once). It prints p50 per run (milliseconds), then ranges
over the runs: what the gateway adds over the direct call (and the ratio) and over the bare
proxy, and the CPU time per call of each process (from /proc; a busy machine inflates it less
than wall time).

Target (issue "MCP gateway"): a REVERSIBLE call adds under 1 ms over stdio.

Usage: uv run python bench/mcp.py [--runs 3] [--calls 400] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if sys.path and Path(sys.path[0]).resolve() == HERE:
    sys.path.pop(0)  # this file is named like the SDK it imports: find the SDK, not this file
# Imported by name for the same reason (a type checker would take ``mcp`` for this file).
_sdk: Any = importlib.import_module("mcp")
ClientSession: Any = _sdk.ClientSession
StdioServerParameters: Any = _sdk.StdioServerParameters
stdio_client: Any = importlib.import_module("mcp.client.stdio").stdio_client

UPSTREAM = HERE / "mcp_upstream" / "server.py"
PROXY = HERE / "mcp_upstream" / "proxy.py"
AGENT_SAGA = shutil.which("agent-saga", path=str(Path(sys.executable).parent)) or "agent-saga"

CONFIG = """
[upstreams.bench]
command = {python!r}
args = [{upstream!r}]

[upstreams.bench.tools.read]
semantics = "reversible"

[upstreams.bench.tools.put.compensate]
tool = "remove"
arguments = {{ key = "args.key" }}
"""


def _children(parent: int) -> dict[int, str]:
    """This machine's processes whose parent is ``parent``, with their command lines (Linux)."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == parent:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
    return found


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _timed(call: Callable[[int], Awaitable[object]], n: int, start: int) -> list[float]:
    out = []
    for i in range(start, start + n):
        begin = time.perf_counter()
        await call(i)
        out.append((time.perf_counter() - begin) * 1000)
    return out


async def one_run(calls: int, rounds: int, directory: Path) -> dict[str, float]:
    """p50 latency (ms) and process CPU per call (ms) of each kind, in alternating rounds."""
    config = directory / "gateway.toml"
    config.write_text(CONFIG.format(python=sys.executable, upstream=str(UPSTREAM)))
    direct = StdioServerParameters(command=sys.executable, args=[str(UPSTREAM)])
    proxy = StdioServerParameters(command=sys.executable, args=[str(PROXY)])
    gateway = StdioServerParameters(
        command=AGENT_SAGA,
        args=["--home", str(directory / "home"), "mcp", "serve", "--config", str(config)],
    )
    async with (
        stdio_client(direct) as (dr, dw),
        ClientSession(dr, dw) as up,
        stdio_client(proxy) as (pr, pw),
        ClientSession(pr, pw) as bare,
        stdio_client(gateway) as (gr, gw),
        ClientSession(gr, gw) as gate,
    ):
        for client in (up, bare, gate):
            await client.initialize()
        mine = _children(os.getpid())
        pids = {
            "floor": _one(mine, "server.py"),
            "proxy": _one(mine, "proxy.py"),
            "reversible": _one(mine, "\x00serve\x00"),
            "compensable": _one(mine, "\x00serve\x00"),
        }
        kinds: dict[str, Callable[[int], Awaitable[object]]] = {
            "floor": lambda i: up.call_tool("read", {"key": f"k{i}"}),
            "proxy": lambda i: bare.call_tool("read", {"key": f"k{i}"}),
            "reversible": lambda i: gate.call_tool("read", {"key": f"k{i}"}),
            "compensable": lambda i: gate.call_tool("put", {"key": f"k{i}", "value": i}),
        }
        samples: dict[str, list[float]] = {kind: [] for kind in kinds}
        cpu: dict[str, float] = dict.fromkeys(kinds, 0.0)
        for call in kinds.values():
            await _timed(call, 20, 0)
        per_round = max(1, calls // rounds)
        for number in range(rounds):  # alternating rounds: a noisy neighbour slows all alike
            start = 1000 + number * per_round
            for kind, call in kinds.items():
                before = _cpu_seconds(pids[kind])
                samples[kind] += await _timed(call, per_round, start)
                cpu[kind] += _cpu_seconds(pids[kind]) - before
    result = {kind: statistics.median(values) for kind, values in samples.items()}
    for kind, seconds in cpu.items():
        result[f"{kind}_cpu"] = seconds * 1000 / (per_round * rounds)
    return result


def _one(processes: dict[int, str], marker: str) -> int:
    [pid] = [pid for pid, line in processes.items() if marker in line]
    return pid


class _CannedUpstream:
    """An upstream that answers at once, in process: what is left is the gateway's own work."""

    def __init__(self) -> None:
        types = importlib.import_module("mcp.types")
        self.answer = types.CallToolResult(
            content=[types.TextContent(type="text", text='{"key": "k", "value": 1}')],
            structured_content={"key": "k", "value": 1},
        )

    async def call(self, upstream: str, tool: str, arguments: Any) -> Any:
        return self.answer


async def saga_work(calls: int, directory: Path) -> dict[str, float]:
    """p50 (ms) of the gateway's handler for a call, with no MCP on either side: routing, the
    session's saga, the gate (input schema included), the log, the result."""
    from types import SimpleNamespace

    from agent_saga import AgentKit, CompensatorRegistry
    from agent_saga_mcp import Gateway, build_routes, load_config
    from agent_saga_mcp._build import gate_rules
    from agent_saga_mcp._gateway import guards_for

    types = importlib.import_module("mcp.types")
    config_path = directory / "gateway.toml"
    config_path.write_text(CONFIG.format(python=sys.executable, upstream=str(UPSTREAM)))
    config = load_config(config_path)
    schema = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
    put = dict(schema, properties={"key": {"type": "string"}, "value": {"type": "integer"}})
    catalog = [
        types.Tool(name="read", input_schema=schema),
        types.Tool(name="put", input_schema=put),
        types.Tool(name="remove", input_schema=schema),
    ]
    routes = build_routes(config, {"bench": catalog})
    registry = CompensatorRegistry()
    upstream = _CannedUpstream()
    rules = gate_rules(config, routes, None)
    kit = AgentKit(home=directory / "home", rules=rules, registry=registry)
    gateway = Gateway(config, kit, routes, guards_for(config, routes, upstream, registry), upstream)
    caller: Any = SimpleNamespace(session_key="stdio", can_elicit=lambda: False)
    out: dict[str, float] = {}
    for name, arguments in (("read", {"key": "k"}), ("put", {"key": "k", "value": 1})):
        params = types.CallToolRequestParams(name=name, arguments=arguments)

        async def call(i: int, params: Any = params) -> object:
            return await gateway.call_tool(caller, params)

        await _timed(call, 50, 0)
        out[name] = statistics.median(await _timed(call, calls, 0))
    await gateway.end_all(clean=True)
    kit.close()
    return out


def _span(values: list[float]) -> str:
    return f"{min(values):.3f}-{max(values):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per run")
    parser.add_argument("--calls", type=int, default=400, help="calls per kind per run")
    parser.add_argument("--quick", action="store_true", help="one run, 100 calls")
    args = parser.parse_args()
    runs, calls = (1, 100) if args.quick else (args.runs, args.calls)
    results = []
    for run in range(runs):
        with tempfile.TemporaryDirectory(prefix="agent-saga-mcp-bench-") as directory:
            result = asyncio.run(one_run(calls, 5, Path(directory)))
        results.append(result)
        kinds = ("floor", "proxy", "reversible", "compensable")
        figures = " | ".join(f"{kind} {result[kind]:.3f} ms" for kind in kinds)
        print(f"run {run + 1} (p50): {figures}")
    with tempfile.TemporaryDirectory(prefix="agent-saga-mcp-bench-") as directory:
        own = asyncio.run(saga_work(calls * 2, Path(directory)))
    print(f"agent-saga MCP gateway over stdio: {runs} run(s) of {calls} calls per kind, p50 ranges")
    floor = [r["floor"] for r in results]
    print(f"  floor: a call straight to the upstream          {_span(floor)} ms")
    bare = [r["proxy"] - r["floor"] for r in results]
    print(f"  a bare MCP proxy (no agent-saga) adds           {_span(bare)} ms")
    for kind in ("reversible", "compensable"):
        added = [r[kind] - r["floor"] for r in results]
        ratio = [r[kind] / r["floor"] for r in results]
        over_proxy = [r[kind] - r["proxy"] for r in results]
        line = (
            f"  {kind.upper():<12} through the gateway adds  {_span(added)} ms "
            f"(x{min(ratio):.2f}-x{max(ratio):.2f}); over the bare proxy {_span(over_proxy)} ms"
        )
        if kind == "reversible":
            line += f"; target < 1 ms: {'met' if max(added) < 1.0 else 'MISSED'}"
        print(line)
    print(
        f"  the gateway's own work, in process (no MCP):    REVERSIBLE {own['read']:.3f} ms, "
        f"COMPENSABLE {own['put']:.3f} ms"
    )
    # CPU per call is less inflated by a busy machine than wall time.
    for kind, who in (
        ("floor", "upstream"),
        ("proxy", "bare proxy"),
        ("reversible", "gateway, REVERSIBLE"),
        ("compensable", "gateway, COMPENSABLE"),
    ):
        values = [r[f"{kind}_cpu"] for r in results]
        print(f"  CPU per call, {who + ' process':<30}   {_span(values)} ms")


if __name__ == "__main__":
    main()
