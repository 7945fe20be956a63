"""The file log at scale: what an operation costs on a log of 1 or 10 million records.

Generates (once, cached under ``--dir``) a home whose log holds REVERSIBLE-only sagas of 18
records each (``saga.begin``, eight steps' intent and outcome, ``saga.end``), sealed with the
core's own chain code rather than by running the engine, then prints for each size:

  * opening a kit and running a one-step saga (target < 50 ms), and recovery's scan for
    unfinished sagas when there are none (target < 100 ms), timed inside a fresh process,
    with its CPU time, beside the same on an empty home (the floor: imports and a first
    saga) measured alternately;
  * ``agent-saga replay <id>`` (< 100 ms) and ``agent-saga sagas --limit 50`` (< 200 ms), as
    wall time of the command, beside the same command on the empty home (the interpreter, the
    CLI's imports and the command's fixed work) and the interpreter importing click and rich's
    console (where any command starts), measured alternately in the same run;
  * ``agent-saga verify``: records per second (target >= 200,000) and peak RSS (< 100 MB), and
    ``verify --since`` the latest checkpoint, against a floor that reads the log's bytes;
  * ``agent-saga certify --since latest`` (from the resume point the verify stored; streams)
    and the full ``agent-saga certify``: wall time, peak RSS and CPU time. The full certify
    streams (its memory holds the sagas open at once), but reads and judges every record
    (about 50 s of CPU per million records of this shape), so it is left out above
    ``--full-certify-max`` records (2 million by default) to keep a run short.

Each figure is the median of ``--rounds`` runs (min-max range printed beside it). Write
throughput and a step's latency are measured by ``bench/durability.py`` and
``bench/step_overhead.py``.

Usage: uv run python bench/scale.py --dir /tmp/scale [--records 1000000 10000000] [--rounds 3]
       [--full-certify-max 2000000]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import shutil
import statistics
import subprocess
import sys
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent_saga._log.chain import Chain
from agent_saga._log.codec import JSONValue
from agent_saga._log.files import OS, WATERMARK_NAME, encode_watermark
from agent_saga._log.records import GENESIS, Entry

segments: types.ModuleType | None
try:
    segments = importlib.import_module("agent_saga._log.segments")
except ImportError:  # a core from before segments: the "before" figures
    segments = None

RECORDS_PER_SAGA = 18
STEPS = (RECORDS_PER_SAGA - 2) // 2
BASE_TS = 1_760_000_000_000
FORMAT = "v1" if segments is None else "v2"
"""Bumped when the generated home's layout changes, so a stale cache is regenerated."""


def saga_id(index: int) -> str:
    """A version 7 UUID for saga ``index``: sagas sort by time, one millisecond apart."""
    ts = BASE_TS + index
    rand = int.from_bytes(hashlib.blake2s(b"%d" % index, digest_size=10).digest())
    high = (ts << 16) | (7 << 12) | ((rand >> 68) & 0xFFF)
    value = (high << 64) | (2 << 62) | (rand & (1 << 62) - 1)
    return str(uuid.UUID(int=value))


def saga_entries(index: int) -> Iterator[Entry]:
    """The 18 entries of a committed saga of eight REVERSIBLE steps, as the engine writes them."""
    sid, ts = saga_id(index), BASE_TS + index
    owner: dict[str, JSONValue] = {"host": "bench", "name": "bench", "owner": "bench-1", "pid": 1}
    yield Entry("saga.begin", sid, owner, ts)
    for ordinal in range(1, STEPS + 1):
        key = hashlib.sha256(f"{sid}\0{ordinal}\0add".encode()).hexdigest()[:32]
        intent: dict[str, JSONValue] = {
            "args": {"x": ordinal},
            "compensation": None,
            "idempotency_key": f"as1-{key}",
            "ordinal": ordinal,
            "semantics": "reversible",
            "tool": "add",
        }
        yield Entry("step.intent", sid, intent, ts)
        done: dict[str, JSONValue] = {
            "ordinal": ordinal,
            "result": ordinal + 1,
            "result_restorable": True,
            "tool": "add",
        }
        yield Entry("step.done", sid, done, ts)
    yield Entry("saga.end", sid, {"records": 17, "status": "committed", "steps": STEPS}, ts)


def sealed_lines(records: int) -> Iterator[tuple[int, str, bytes]]:
    """``(seq, hash, stored line)`` of each record of the generated log, sealed in order."""
    chain, seq, prev = Chain(), 0, GENESIS
    started = time.perf_counter()
    for index in range(records // RECORDS_PER_SAGA):
        for entry in saga_entries(index):
            seq += 1
            record, line = chain.seal(entry, seq, prev)
            prev = record.hash
            yield seq, prev, line
        if index % 50_000 == 0 and index:
            rate = seq / (time.perf_counter() - started)
            print(f"  generated {seq:,} records ({rate:,.0f}/s)", file=sys.stderr)


def generate(home: Path, records: int) -> None:
    """Write a log of ``records`` records (a multiple of 18) into ``home``: one file before
    segments existed, else segments of the store's default size with their summaries."""
    home.mkdir(parents=True, exist_ok=True)
    if segments is None:
        with (home / "log.jsonl").open("wb", buffering=1 << 22) as out:
            for _, _, line in sealed_lines(records):
                out.write(line)
            out.flush()
            os.fsync(out.fileno())
            size = out.tell()
        (home / WATERMARK_NAME).write_bytes(encode_watermark(size))
        return
    (home / segments.SEGMENTS_DIR).mkdir(exist_ok=True)
    first, start_prev, prev, size = 1, GENESIS, GENESIS, 0
    out = open(segments.segment(home, 1).path, "wb", buffering=1 << 22)  # noqa: SIM115
    for seq, digest, line in sealed_lines(records):
        out.write(line)
        size += len(line)
        prev = digest
        if size >= segments.SEGMENT_BYTES or seq - first + 1 >= segments.SEGMENT_RECORDS:
            out.close()
            summary = segments.Summary(first, seq, start_prev, prev, size)
            segments.write_summary(OS, home, summary)
            first, start_prev, size = seq + 1, prev, 0
            out = open(segments.segment(home, first).path, "wb", buffering=1 << 22)  # noqa: SIM115
    out.close()
    Path(segments.segment(home, first).mark).write_bytes(encode_watermark(size))


def cached_home(directory: Path, records: int) -> Path:
    """The generated home for ``records``, generated now unless a complete copy is cached."""
    home = directory / f"scale-{FORMAT}-{records}"
    done = home / ".generated"
    if not done.exists():
        shutil.rmtree(home, ignore_errors=True)
        print(f"generating {records:,} records in {home} ...", file=sys.stderr)
        generate(home, records)
        # the first open migrates or indexes what it must; that is set-up, not what is measured
        run_python(OPEN_AND_STEP, home)
        done.write_text("ok\n")
    return home


OPEN_AND_STEP = """
import sys, time
from agent_saga import REVERSIBLE, AgentKit
start, cpu = time.perf_counter(), time.process_time()
kit = AgentKit(home=sys.argv[1])
@kit.tool(semantics=REVERSIBLE)
def add(x: int) -> int:
    return x + 1
with kit.transaction("one-step"):
    add(1)
opened, opened_cpu = time.perf_counter() - start, time.process_time() - cpu
start = time.perf_counter()
report = kit.recover()
recovered = time.perf_counter() - start
kit.close()
print(opened, recovered, opened_cpu)
"""


LIBRARIES = "import click, rich.console, rich.text"
"""What every command of the command line imports before any of agent-saga's own modules."""


def run_python(code: str, home: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, str(home)], check=True, capture_output=True, text=True
    )
    return done.stdout


LAST_CPU: list[float] = [0.0]
"""CPU seconds (user + system) of the last command :func:`run_measured` ran."""


def run_measured(argv: list[str]) -> tuple[float, float, int, str]:
    """Wall seconds, peak RSS in MB, exit code and output of one command (its CPU seconds in
    :data:`LAST_CPU`: less sensitive to a loaded machine than wall time)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - start
    LAST_CPU[0] = usage.ru_utime + usage.ru_stime
    return elapsed, usage.ru_maxrss / 1024, proc.returncode, output.decode(errors="replace")


def cli(home: Path, *args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "agent-saga"), "--home", str(home), *args]


def span(values: list[float], unit: str, scale: float = 1.0) -> str:
    med = statistics.median(values) * scale
    return f"{med:,.1f} {unit} ({min(values) * scale:,.1f}-{max(values) * scale:,.1f})"


def read_floor(home: Path) -> float:
    """Seconds to read every byte of the home's log files once (the cost of any full read)."""
    start = time.perf_counter()
    for path in sorted(home.rglob("*.jsonl")):
        with path.open("rb") as handle:
            while handle.read(1 << 22):
                pass
    return time.perf_counter() - start


def has_option(home: Path, command: str, option: str) -> bool:
    _, _, _, out = run_measured(cli(home, command, "--help"))
    return option in out


def timed(results: dict[str, list[Any]], name: str, argv: list[str]) -> tuple[int, str]:
    """Run ``argv`` once, adding its wall time, peak RSS and CPU time to ``results`` under
    ``name``, ``name_rss`` and ``name_cpu``; returns its exit code and output."""
    elapsed, rss, code, out = run_measured(argv)
    for key, value in ((name, elapsed), (f"{name}_rss", rss), (f"{name}_cpu", LAST_CPU[0])):
        results.setdefault(key, []).append(value)
    return code, out


def measure(home: Path, records: int, rounds: int, full_certify: bool) -> None:
    target = saga_id(records // RECORDS_PER_SAGA // 2)
    paged = has_option(home, "sagas", "--limit")
    sagas_args = ["sagas", "--limit", "50"] if paged else ["sagas"]
    since_ok = (home / "checkpoints" / "latest.note").exists()
    results: dict[str, list[Any]] = {}

    def add(name: str, value: Any) -> None:
        results.setdefault(name, []).append(value)

    empty = home.parent / f"{home.name}-empty"
    shutil.rmtree(empty, ignore_errors=True)
    run_python(OPEN_AND_STEP, empty)  # its first open creates the home: not measured
    listed = run_measured(cli(empty, "sagas", "--limit", "1") if paged else cli(empty, "sagas"))[3]
    empty_target = listed.splitlines()[1].split()[0]  # the one-step saga (under the header)
    for _ in range(rounds):
        opened, recovered, opened_cpu = (float(v) for v in run_python(OPEN_AND_STEP, home).split())
        add("open", opened)
        add("open_cpu", opened_cpu)
        add("recover", recovered)
        opened, recovered, opened_cpu = (float(v) for v in run_python(OPEN_AND_STEP, empty).split())
        add("open_floor", opened)
        add("open_floor_cpu", opened_cpu)
        add("recover_floor", recovered)
        add("libraries", run_measured([sys.executable, "-c", LIBRARIES])[0])
        add("replay_floor", run_measured(cli(empty, "replay", empty_target))[0])
        add("replay", run_measured(cli(home, "replay", target))[0])
        add("sagas_floor", run_measured(cli(empty, *sagas_args))[0])
        add("sagas", run_measured(cli(home, *sagas_args))[0])
        add("read", read_floor(home))
        code, out = timed(results, "verify", cli(home, "verify"))
        if code != 0:
            print(out[-2000:], file=sys.stderr)
            raise SystemExit(f"verify failed on the generated log (exit {code})")
        if since_ok:
            note = str(home / "checkpoints" / "latest.note")
            _, out = timed(results, "since", cli(home, "verify", "--since", note))
            resumed = [line for line in out.splitlines() if "resumed after" in line]
            results.setdefault("since_says", []).append(resumed[0] if resumed else 0.0)
            code, out = timed(results, "certify_since", cli(home, "certify", "--since", "latest"))
            if code != 0:
                print(out[-2000:], file=sys.stderr)
        if full_certify:
            timed(results, "certify", cli(home, "certify"))
    report(home, records, rounds, results, sagas_args, since_ok=since_ok)


def report(
    home: Path,
    records: int,
    rounds: int,
    results: dict[str, list[Any]],
    sagas_args: list[str],
    *,
    since_ok: bool,
) -> None:
    """Print the figures of :func:`measure`: medians with their min-max range."""
    rates = [records / t for t in results["verify"]]
    print(f"\n{records:,} records, {log_bytes(home) / 1e6:,.0f} MB, {rounds} rounds")
    print(f"  open a kit + one-step saga  {span(results['open'], 'ms', 1000)}   target < 50 ms")
    print(f"    the same on an empty home {span(results['open_floor'], 'ms', 1000)} (the floor)")
    print(
        f"    CPU: {span(results['open_cpu'], 'ms', 1000)}; on an empty home "
        f"{span(results['open_floor_cpu'], 'ms', 1000)}"
    )
    print(f"  recovery scan (none)        {span(results['recover'], 'ms', 1000)}   target < 100 ms")
    print(f"    the same on an empty home {span(results['recover_floor'], 'ms', 1000)}")
    for name, label, goal in (
        ("replay", "replay <id>", 100),
        ("sagas", " ".join(sagas_args), 200),
    ):
        floor = statistics.median(results[f"{name}_floor"])
        over = [(t - floor) * 1000 for t in results[name]]
        print(
            f"  {label:<27} {span(results[name], 'ms', 1000)}   target < {goal} ms; the same "
            f"on an empty home {span(results[f'{name}_floor'], 'ms', 1000)}, over it "
            f"{span(over, 'ms')}"
        )
    print(
        f"    the interpreter with click and rich's console (any command's start) "
        f"{span(results['libraries'], 'ms', 1000)}"
    )
    print(
        f"  verify                      {span(rates, 'records/s')}, peak RSS "
        f"{span(results['verify_rss'], 'MB')}   target >= 200,000/s, < 100 MB"
    )
    cpu_rates = [records / t for t in results["verify_cpu"]]
    print(f"  verify, per CPU second       {span(cpu_rates, 'records/s')}")
    ratio = [v / statistics.median(results["read"]) for v in results["verify"]]
    print(f"  verify / read-the-bytes     {span(ratio, 'x')}")
    if since_ok:
        print(
            f"  verify --since latest       {span(results['since'], 'ms', 1000)}, peak RSS "
            f"{span(results['since_rss'], 'MB')}, CPU {span(results['since_cpu'], 'ms', 1000)}"
        )
        print(f"    (last round: {results['since_says'][-1] or 'read the whole log'})")
    if "certify_since" in results:
        print(
            f"  certify --since latest      {span(results['certify_since'], 's')}, peak RSS "
            f"{span(results['certify_since_rss'], 'MB')}, CPU "
            f"{span(results['certify_since_cpu'], 's')}"
        )
    if "certify" in results:
        print(
            f"  certify                     {span(results['certify'], 's')}, peak RSS "
            f"{span(results['certify_rss'], 'MB')}, CPU {span(results['certify_cpu'], 's')}"
        )
    else:
        print("  certify                     not run (above --full-certify-max records)")
    print(f"  load average at the end     {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


def log_bytes(home: Path) -> int:
    return sum(p.stat().st_size for p in home.rglob("*.jsonl"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="where generated logs are cached")
    parser.add_argument("--records", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--full-certify-max",
        type=int,
        default=2_000_000,
        help="run the full certify (every record read and judged) only up to this many records",
    )
    args = parser.parse_args()
    for wanted in args.records:
        records = wanted - wanted % RECORDS_PER_SAGA
        home = cached_home(args.dir, records)
        print(f"load average at the start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        measure(home, records, args.rounds, records <= args.full_certify_max)


if __name__ == "__main__":
    main()
