"""The sequence-flow graph of a process: order, reachability and cycles.

Plain functions over node ids and ``(source, target)`` pairs; iterative (no recursion), so a
long flow cannot exhaust the stack, and linear in nodes plus edges.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Sequence


def successors(edges: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Each node's targets, in edge order."""
    out: dict[str, list[str]] = {}
    for source, target in edges:
        out.setdefault(source, []).append(target)
    return out


def flow_order(nodes: Sequence[str], edges: Sequence[tuple[str, str]]) -> list[str]:
    """``nodes`` in a topological order of ``edges`` (ties in document order); nodes on a
    cycle, which have no such order, follow in document order."""
    position = {node: index for index, node in enumerate(nodes)}
    incoming = dict.fromkeys(nodes, 0)
    after = successors(edges)
    for _, target in edges:
        if target in incoming:
            incoming[target] += 1
    ready = sorted((n for n in nodes if incoming[n] == 0), key=position.__getitem__)
    order: list[str] = []
    queue = deque(ready)
    while queue:
        node = queue.popleft()
        order.append(node)
        freed = []
        for target in after.get(node, ()):
            incoming[target] -= 1
            if incoming[target] == 0:
                freed.append(target)
        queue.extend(sorted(freed, key=position.__getitem__))
    placed = set(order)
    return order + [n for n in nodes if n not in placed]


def reachable(
    starts: Iterable[str], edges: Iterable[tuple[str, str]], blocked: Collection[str] = ()
) -> set[str]:
    """The nodes reachable from ``starts`` (included) without passing through ``blocked``
    (a blocked node is reached but not passed)."""
    after = successors(edges)
    seen = set(starts)
    queue = deque(seen)
    while queue:
        node = queue.popleft()
        if node in blocked:
            continue
        for target in after.get(node, ()):
            if target not in seen:
                seen.add(target)
                queue.append(target)
    return seen


def cycles(
    nodes: Sequence[str], edges: Sequence[tuple[str, str]], limit: int | None = None
) -> list[list[str]]:
    """One cycle (its nodes in flow order, starting where it is entered) per back edge found by
    a depth-first search from each node in document order; each cycle is reported once, and
    at most ``limit`` of them (the first found) when it is given.

    Linear in nodes plus edges, plus the length of each cycle reported: a back edge seen again
    (a parallel sequence flow) is not followed a second time, and the search stops at the limit.
    """
    after = successors(edges)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    depth: dict[str, int] = {}  # a node on the current path -> its index in ``path``
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    back_edges: set[tuple[str, str]] = set()
    for root in nodes:
        if root in state:
            continue
        path: list[str] = [root]
        stack = [iter(after.get(root, ()))]
        state[root], depth[root] = 1, 0
        while stack:
            if limit is not None and len(found) >= limit:
                return found
            target = next(stack[-1], None)
            if target is None:
                node = path.pop()
                state[node] = 2
                del depth[node]
                stack.pop()
            elif state.get(target) == 1:
                if (path[-1], target) in back_edges:
                    continue
                back_edges.add((path[-1], target))
                loop = path[depth[target] :]
                if frozenset(loop) not in seen:
                    seen.add(frozenset(loop))
                    found.append(loop)
            elif target not in state:
                state[target], depth[target] = 1, len(path)
                path.append(target)
                stack.append(iter(after.get(target, ())))
    return found
