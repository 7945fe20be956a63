"""What the pytest plugin adds to pytest start-up when a test uses none of its fixtures.

Runs ``python -m pytest`` on a one-test file that uses no agent-saga fixture, in two pairs:

* as users run it (every installed plugin autoloaded), with the plugin and with
  ``-p no:agent_saga``;
* with autoloading off (no other plugin adds its noise), with nothing and with ``-p
  pytest_agent_saga.plugin``. This arm also pays a scan of the installed entry points that
  pytest does to resolve ``-p`` names (autoloading does that scan anyway), so it is an upper
  bound.

Each round runs both commands of a pair back to back (order alternating); the figures are the
medians of the per-round differences, in wall time and in the children's CPU time (less
disturbed by other processes on a shared machine).

Measured as users run it, with a bytecode cache: ``PYTHONDONTWRITEBYTECODE`` is dropped and
the cache goes to a temporary ``PYTHONPYCACHEPREFIX`` that a first run warms (without a cache,
compiling pytest itself dominates and varies by more than the plugin costs).

On a shared machine whole-process timings vary by far more than the plugin costs, so two
figures that load barely moves are printed too: the self time of importing the plugin's modules
after pytest (``-X importtime``), and the time a profiled pytest run spends in the plugin's own
code (its import and its hooks). A bare interpreter start is printed as the floor.

Target (issue 6): under 50 ms added to start-up.

Usage: uv run python bench/plugin_startup.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEST_FILE = "def test_plain():\n    assert 1 + 1 == 2\n"
PLUGIN = "pytest_agent_saga.plugin"


def measure(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, children's CPU ms) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{result.stdout}{result.stderr}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


def plugin_import_ms(env: dict[str, str]) -> float:
    """Self time of the plugin package's modules when imported after pytest."""
    code = f"import pytest; import {PLUGIN}"
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    total = 0
    for line in result.stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2].startswith("pytest_agent_saga"):
            total += int(parts[0])
    return total / 1000


class Pair:
    """Two commands run back to back each round (order alternating)."""

    def __init__(self, first: list[str], second: list[str], env: dict[str, str]) -> None:
        self.argv = (first, second)
        self.env = env
        self.wall: tuple[list[float], list[float]] = ([], [])
        self.cpu: tuple[list[float], list[float]] = ([], [])

    def run(self, root: Path, rounds: int) -> None:
        for n in range(rounds):
            for arm in (0, 1) if n % 2 == 0 else (1, 0):
                wall, cpu = measure(self.argv[arm], root, self.env)
                self.wall[arm].append(wall)
                self.cpu[arm].append(cpu)

    def report(self, labels: tuple[str, str]) -> None:
        med = statistics.median
        for arm, label in enumerate(labels):
            print(
                f"  {label:<40} {med(self.wall[arm]):7.1f} ms wall {med(self.cpu[arm]):7.1f} ms CPU"
            )
        wall_diffs = [b - a for a, b in zip(*self.wall, strict=True)]
        cpu_diffs = [b - a for a, b in zip(*self.cpu, strict=True)]
        print(
            f"  added, median of per-round differences   {med(wall_diffs):7.1f} ms wall "
            f"{med(cpu_diffs):7.1f} ms CPU"
        )
        print(
            f"  added, difference of the fastest runs    "
            f"{min(self.wall[1]) - min(self.wall[0]):7.1f} ms wall "
            f"{min(self.cpu[1]) - min(self.cpu[0]):7.1f} ms CPU"
        )


def plugin_code_ms(argv: list[str], root: Path, env: dict[str, str]) -> float:
    """Time pytest spends in the plugin's own code (its modules' import and its hooks), read
    from a profile of one run: a figure the machine's load barely moves (profiled, so an upper
    bound)."""
    profile = root / "run.prof"
    command = [sys.executable, "-m", "cProfile", "-o", str(profile), *argv[1:]]
    subprocess.run(command, cwd=root, env=env, capture_output=True, check=True)
    stats = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    total = 0.0
    for (filename, _, _name), (_, _, _, cumulative, callers) in stats.items():
        if "pytest_agent_saga" not in filename:
            continue
        if not any("pytest_agent_saga" in caller[0] for caller in callers):
            total += cumulative  # an entry into the plugin from pytest or the import system
    return total * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    med = statistics.median
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
        isolated = {**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        (root / "pytest.ini").write_text("[pytest]\n")
        (root / "test_plain.py").write_text(TEST_FILE)
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        base += ["-p", "no:langsmith_plugin"]  # as the repository's configuration does
        plain = [*base, "test_plain.py"]  # the plugin loads unless autoloading is off
        without = [*base, "-p", "no:agent_saga", "test_plain.py"]
        alone = [*base, "-p", PLUGIN, "test_plain.py"]
        for _ in range(2):  # warm the bytecode and page caches
            measure(plain, root, env)
            measure(alone, root, isolated)
            plugin_import_ms(env)
        bare = [measure([sys.executable, "-c", "pass"], root, env)[0] for _ in range(5)]
        autoloaded = Pair(without, plain, env)
        autoloaded.run(root, args.rounds)
        by_name = Pair(plain, alone, isolated)
        by_name.run(root, args.rounds)
        imports = [plugin_import_ms(env) for _ in range(5)]
        own = [plugin_code_ms(plain, root, env) for _ in range(5)]
    print(f"rounds: {args.rounds} per pair (back to back, order alternating)")
    print(f"floor: bare interpreter start (median)          {med(bare):7.1f} ms")
    print("every installed plugin autoloaded (as users run it):")
    autoloaded.report(
        ("pytest, one plain test, -p no:agent_saga", "pytest, one plain test, plugin loaded")
    )
    print("no other plugin (PYTEST_DISABLE_PLUGIN_AUTOLOAD=1; the plugin by -p):")
    by_name.report(("pytest, one plain test, no plugin", "pytest, one plain test, the plugin"))
    print(f"import of the plugin's modules after pytest     {med(imports):7.1f} ms (self time)")
    print(f"time in the plugin's own code (import, hooks)   {med(own):7.1f} ms (profiled)")
    print("target: under 50 ms added")


if __name__ == "__main__":
    main()
