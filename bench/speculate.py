"""What predictive pre-execution saves an agent loop, and what a lease costs, against floors
measured in the same run.

A scripted agent loop: each turn the model "thinks" (an ``asyncio.sleep`` of ``--model-ms``) and
then confirms a call to a slow REVERSIBLE lookup (``--tool-ms``). Without speculation the two
waits add up; with it, the agent starts the lookup it predicts (``kit.aspeculate``) while the
model thinks, and the confirmed call takes the result run ahead. ``--hit-rate`` of the
predictions are right; a wrong one is refused and the call runs normally. Floors: the two waits
added up (without) and the longer of the two (with), per turn.

Per-call costs (p50, in-process, alternating rounds):
  * lease issue + check alone (the asl3 text: packed claims, keyed BLAKE2s MACs, strict
    parsing), against the floor of two bare HMAC-SHA-256 computations over the same bytes (the
    floor the asl2 figures were measured against, kept so the ratios compare);
  * a speculated step and its confirmed call, against a plain step, on the memory store;
  * a durable redemption (the spent mark, fsynced) on the file store, against one bare
    create + fsync + directory fsync in the same directory.

Target (issue 20): lease issue + check < 20 us.

Usage: uv run python bench/speculate.py [--quick] [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from _timing import p50, timed
from agent_saga import REVERSIBLE, AgentKit
from agent_saga._engine.speculation.keys import MemoryLeaseKeys
from agent_saga._engine.speculation.lease import LeaseClaims, args_digest, check, issue
from agent_saga._log.codec import canonical


def _kit(home: Path, store: str) -> tuple[AgentKit, object, object]:
    kit = AgentKit(home=home, store=store, checkpoints=False)

    @kit.tool(name="bench.lookup", semantics=REVERSIBLE)
    async def alookup(sku: str, delay: float) -> str:
        await asyncio.sleep(delay)
        return f"price:{sku}"

    @kit.tool(name="bench.read", semantics=REVERSIBLE)
    def read(sku: str) -> str:
        return sku

    return kit, alookup, read


async def _loop(kit: AgentKit, lookup: object, turns: int, model: float, tool: float,
                hit: float, speculate: bool, seed: int) -> float:  # fmt: skip
    rng = random.Random(seed)
    start = time.perf_counter()
    async with kit.transaction("bench-agent"):
        for turn in range(turns):
            confirmed = f"sku-{turn}"
            predicted = confirmed if rng.random() < hit else f"other-{turn}"
            if speculate:
                await asyncio.gather(
                    asyncio.sleep(model), kit.aspeculate(lookup, sku=predicted, delay=tool)
                )
            else:
                await asyncio.sleep(model)
            await lookup(sku=confirmed, delay=tool)  # type: ignore[operator]
    return (time.perf_counter() - start) / turns


def loop_round(args: argparse.Namespace, seed: int) -> tuple[float, float]:
    """Seconds per turn without and with speculation (alternating which goes first)."""
    model, tool = args.model_ms / 1000, args.tool_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        kit, lookup, _ = _kit(Path(tmp), "memory")
        with kit:
            runs = [(False, 0.0), (True, 0.0)]
            if seed % 2:
                runs.reverse()
            out = {}
            for speculate, _ in runs:
                out[speculate] = asyncio.run(
                    _loop(kit, lookup, args.turns, model, tool, args.hit_rate, speculate, seed)
                )
    return out[False], out[True]


def lease_costs(n: int) -> tuple[list[int], list[int], float, float]:
    """Timings of issue + check and of the floor (two bare HMACs over the same bytes), then the
    process CPU time per operation of each, in microseconds (less sensitive to other load)."""
    keys = MemoryLeaseKeys()
    now = time.time()
    key = keys.current(now)
    given = canonical({"sku": "A1", "qty": 2})
    digest = args_digest(key, given)
    claims = LeaseClaims(key.kid, "saga-1", "bench.read", 1, "ab" * 32, digest, 2**41, "cd" * 16)
    payload = claims.payload()

    def both() -> None:
        token = issue(key, claims)
        check(token, keys, now, saga="saga-1", tool="bench.read", canonical_args=given)

    def floor() -> None:
        hmac.new(key.secret, payload, hashlib.sha256).digest()
        hmac.new(key.secret, payload, hashlib.sha256).digest()

    cpu = time.process_time()
    both_times = timed(both, n)
    both_cpu = (time.process_time() - cpu) / n * 1e6
    cpu = time.process_time()
    floor_times = timed(floor, n)
    floor_cpu = (time.process_time() - cpu) / n * 1e6
    return both_times, floor_times, both_cpu, floor_cpu


def step_costs(n: int) -> tuple[list[int], list[int]]:
    """Timings of a speculated step + its confirmed call, and of a plain step (memory store)."""
    with tempfile.TemporaryDirectory() as tmp:
        kit, _, read = _kit(Path(tmp), "memory")
        with kit, kit.transaction("bench-steps"):
            plain = timed(lambda: read(sku="A1"), n)  # type: ignore[operator]

            def ahead() -> None:
                kit.speculate(read, sku="A1")
                read(sku="A1")  # type: ignore[operator]

            both = timed(ahead, n)
    return both, plain


def durable_costs(n: int) -> tuple[list[int], list[int]]:
    """Timings of a durable redemption's mark, and of a bare create + fsync + dir fsync."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        kit, _, _ = _kit(home, "file")
        floor_dir = home / "floor"
        floor_dir.mkdir()
        counter = iter(range(10**9))

        def bare() -> None:
            fd = os.open(floor_dir / str(next(counter)), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            os.fsync(fd)
            os.close(fd)
            dfd = os.open(floor_dir, os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)

        with kit, kit.transaction("bench-durable"):
            spent = kit.speculation.spent
            marks = timed(lambda: spent.spend(os.urandom(16).hex(), 2**41, time.time()), n)
            floor = timed(bare, n)
    return marks, floor


def _range(values: list[float], unit: str = "") -> str:
    return f"{min(values):.2f}-{max(values):.2f}{unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer turns and samples")
    parser.add_argument("--runs", type=int, default=5, help="alternating rounds")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--model-ms", type=float, default=40.0)
    parser.add_argument("--tool-ms", type=float, default=25.0)
    parser.add_argument("--hit-rate", type=float, default=0.8)
    args = parser.parse_args()
    if args.quick:
        args.turns, args.runs = 8, 3
    n = 500 if args.quick else 5_000

    saved, ratio_without, ratio_with, issue_check, issue_ratio = [], [], [], [], []
    issue_cpu, floor_cpu = [], []
    step_extra, mark_ratio, marks_ms = [], [], []
    for run in range(args.runs):
        without, with_ = loop_round(args, run)
        floor_without = (args.model_ms + args.tool_ms) / 1000
        floor_with = max(args.model_ms, args.tool_ms) / 1000
        saved.append((1 - with_ / without) * 100)
        ratio_without.append(without / floor_without)
        ratio_with.append(with_ / floor_with)
        both, floor, both_cpu, bare_cpu = lease_costs(n)
        issue_cpu.append(both_cpu)
        floor_cpu.append(bare_cpu)
        issue_check.append(p50(both))
        issue_ratio.append(p50(both) / p50(floor))
        ahead, plain = step_costs(n // 5)
        step_extra.append(p50(ahead) - p50(plain))
        marks, bare = durable_costs(20 if args.quick else 50)
        marks_ms.append(p50(marks) / 1000)
        mark_ratio.append(statistics.median(marks) / statistics.median(bare))

    print(
        f"agent-saga speculation, {args.runs} alternating rounds "
        f"({'quick' if args.quick else 'full'}): ranges are min-max over the rounds"
    )
    print(
        f"  agent loop, {args.turns} turns, model {args.model_ms:g} ms + lookup "
        f"{args.tool_ms:g} ms, {args.hit_rate:.0%} of predictions right:"
    )
    print(f"    end-to-end time saved per turn:        {_range(saved, ' %')}")
    print(f"    without speculation / its floor (sum): {_range(ratio_without, 'x')}")
    print(f"    with speculation / its floor (max):    {_range(ratio_with, 'x')}")
    met = "met" if max(issue_check) < 20 else "MISSED"
    print(f"  lease issue + check, p50:                {_range(issue_check, ' us')} "
          f"(target < 20 us: {met})")  # fmt: skip
    print(f"    / two bare HMAC-SHA-256 (floor):       {_range(issue_ratio, 'x')}")
    over = sum(1 for value in issue_check if value >= 20)
    print(f"    rounds at or over 20 us:               {over} of {len(issue_check)} "
          f"(median round {statistics.median(issue_check):.2f} us)")  # fmt: skip
    print(f"    process CPU time per issue + check:    {_range(issue_cpu, ' us')} "
          f"(floor {_range(floor_cpu, ' us')})")  # fmt: skip
    print(
        f"  speculated step + confirmed call, minus a plain step, p50: {_range(step_extra, ' us')}"
    )
    print(f"  durable redemption mark (file store), p50: {_range(marks_ms, ' ms')}")
    print(f"    / bare create + fsync + dir fsync:     {_range(mark_ratio, 'x')}")


if __name__ == "__main__":
    main()
