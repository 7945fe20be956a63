"""The core's layers, as ``docs/architecture.md`` states them, hold in its imports; no package of
the workspace has an import circle.

The order is read from the table under "Layers of the core" in ``docs/architecture.md``, so the
document and this test cannot drift apart. Every import counts, including those deferred into
functions and those under ``if TYPE_CHECKING:``, since each is a dependency of the importing
module on the imported one. ``from pkg.mod import name`` depends on ``pkg.mod.name`` when that
is a module, else on ``pkg.mod``.
"""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

# -- reading the imports -------------------------------------------------------------------


@dataclass(frozen=True)
class Module:
    """A module of the package: its dotted name and its file."""

    name: str
    path: Path


def modules_of(src: Path, package: str) -> dict[str, Module]:
    """Every module of ``package`` found under the source directory ``src``."""
    found: dict[str, Module] = {}
    for path in sorted((src / package.replace(".", "/")).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = Module(".".join(parts), path)
    return found


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.name.split(".")
    if module.path.name != "__init__.py":
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(module: Module, known: Mapping[str, Module], package: str) -> set[str]:
    """The modules of ``package`` that ``module`` imports anywhere in its body."""
    tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            names = [
                f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target
                for alias in node.names
            ]
        else:
            continue
        found.update(name for name in names if name == package or name.startswith(package + "."))
    found.discard(module.name)
    return found


def import_graph(src: Path, package: str) -> tuple[dict[str, Module], dict[str, set[str]]]:
    """The modules of ``package`` and, for each, the package's modules it imports."""
    known = modules_of(src, package)
    return known, {name: imports_of(mod, known, package) for name, mod in known.items()}


def layer_of(module: str, layers: Sequence[tuple[str, Sequence[str]]]) -> int:
    """The index of the layer whose longest prefix names ``module``.

    Raises:
        LookupError: no layer names the module (every module must have a place).
    """
    best, best_len = -1, -1
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best < 0:
        raise LookupError(f"{module} belongs to no layer")
    return best


def upward_imports(
    modules: Mapping[str, Module],
    graph: Mapping[str, set[str]],
    layers: Sequence[tuple[str, Sequence[str]]],
) -> list[str]:
    """One line per import of a higher layer by a lower one, naming both files and layers."""
    problems = []
    for name, targets in sorted(graph.items()):
        own = layer_of(name, layers)
        for target in sorted(targets):
            other = layer_of(target, layers)
            if other > own:
                problems.append(
                    f"{modules[name].path} (layer {layers[own][0]}) imports "
                    f"{modules[target].path} (layer {layers[other][0]}, above it)"
                )
    return problems


def import_cycles(modules: Mapping[str, Module], graph: Mapping[str, set[str]]) -> list[str]:
    """One line per import circle (a strongly connected set of modules), naming its files."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative (no recursion limit)
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        circles.append(sorted(members))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return [" <-> ".join(str(modules[m].path) for m in circle) for circle in sorted(circles)]


# -- the core's layers ----------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
CORE_SRC = ROOT / "packages" / "agent-saga-core" / "src"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

Layers = list[tuple[str, list[str]]]


def documented_layers(text: str) -> Layers:
    """The layer table of ``docs/architecture.md``: ``(name, module prefixes)``, lowest first."""
    section = text.split("## Layers of the core", 1)[1].split("\n## ", 1)[0]
    layers: Layers = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not line.lstrip().startswith("|") or cells[0] in ("layer", "---"):
            continue
        prefixes = []
        for place in re.findall(r"`([^`]+)`", cells[1]):
            path = place.removesuffix("/").removesuffix(".py").removesuffix("__init__")
            dotted = path.strip("/").replace("/", ".")
            prefixes.append("agent_saga" + (f".{dotted}" if dotted else ""))
        layers.append((cells[0], prefixes))
    return layers


@pytest.fixture(scope="module")
def layers() -> Layers:
    found = documented_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    assert len(found) >= 8, f"no layer table found in {ARCHITECTURE}"
    return found


def test_every_module_of_the_core_has_a_documented_layer(layers: Layers) -> None:
    homeless = []
    for name in modules_of(CORE_SRC, "agent_saga"):
        try:
            layer_of(name, layers)
        except LookupError as exc:
            homeless.append(str(exc))
    assert homeless == []


def test_no_lower_layer_of_the_core_imports_a_higher_one(layers: Layers) -> None:
    modules, graph = import_graph(CORE_SRC, "agent_saga")
    assert upward_imports(modules, graph, layers) == []


def test_the_top_folder_shows_the_layers() -> None:
    entries = sorted(p.name for p in (CORE_SRC / "agent_saga").iterdir() if p.name != "__pycache__")
    assert len(entries) <= 15, entries


MEMBERS = sorted(
    (src, package.name)
    for src in (ROOT / "packages").glob("*/src")
    for package in src.iterdir()
    if (package / "__init__.py").is_file()
)


@pytest.mark.parametrize(("src", "package"), MEMBERS, ids=[name for _, name in MEMBERS])
def test_no_import_circle(src: Path, package: str) -> None:
    modules, graph = import_graph(src, package)
    assert import_cycles(modules, graph) == []


# -- the checks catch what they are for -------------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_an_upward_import_and_a_circle_in_a_small_package_are_named(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "demo/__init__.py": "",
            "demo/low/__init__.py": "",
            "demo/low/base.py": "def helper() -> None:\n    from ..high import top\n",
            "demo/high/__init__.py": "",
            "demo/high/top.py": "from ..low import base\n",
            "demo/high/a.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from .b import B\n",
            "demo/high/b.py": "from demo.high.a import *\nclass B: ...\n",
        },
    )
    modules, graph = import_graph(tmp_path, "demo")
    order: Layers = [("low", ["demo.low"]), ("high", ["demo.high", "demo"])]
    upward = upward_imports(modules, graph, order)
    assert len(upward) == 1
    assert str(tmp_path / "demo/low/base.py") in upward[0]
    assert str(tmp_path / "demo/high/top.py") in upward[0]
    circles = import_cycles(modules, graph)
    assert sorted(circles) == sorted(
        [
            f"{tmp_path / 'demo/high/a.py'} <-> {tmp_path / 'demo/high/b.py'}",
            f"{tmp_path / 'demo/high/top.py'} <-> {tmp_path / 'demo/low/base.py'}",
        ]
    )


def test_an_upward_import_added_to_the_real_core_is_caught(tmp_path: Path, layers: Layers) -> None:
    shutil.copytree(CORE_SRC / "agent_saga", tmp_path / "agent_saga")
    codec = tmp_path / "agent_saga" / "_log" / "codec.py"
    codec.write_text(
        codec.read_text(encoding="utf-8") + "\nfrom .._kit.agentkit import AgentKit\n",
        encoding="utf-8",
    )
    modules, graph = import_graph(tmp_path, "agent_saga")
    upward = upward_imports(modules, graph, layers)
    assert upward == [
        f"{codec} (layer log) imports {tmp_path / 'agent_saga/_kit/agentkit.py'} "
        "(layer kit, above it)"
    ]
    assert any(str(codec) in circle for circle in import_cycles(modules, graph))
