"""Inclusion proofs for a few records in one streaming pass, never holding every leaf.

A disclosure bundle proves one saga's records (and the redaction records naming them) under a
checkpoint of the whole log. Its inclusion paths need, for each proven leaf ``m`` of a tree of
``n`` leaves (RFC 9162 ``PATH(m, D[0:n])``), the roots of a few ranges of leaves, each of which
is one of three kinds, all collected while the leaves stream by:

* a complete subtree left of ``m``: one of the Merkle frontier's subtrees when leaf ``m``
  arrives (the frontier tiles ``[0, m)`` with exactly those), copied then;
* a complete subtree right of ``m``: built by the frontier as leaves are appended (each merge
  yields the root of a complete, aligned subtree), kept when it is one asked for: every right
  sibling of ``m``'s ancestors is asked for when leaf ``m`` arrives;
* a range that ends at ``n`` (the tree's right edge): the fold of the final frontier's
  subtrees from its start.

Memory is O(k log n) hashes for ``k`` proven records, plus those records; the pass itself is
the streaming verify of :mod:`._stream`, so the log is verified as it is read.
"""

from __future__ import annotations

import hashlib
from binascii import unhexlify
from collections.abc import Callable

from .._log.chain import Chain, parse_line
from .._log.records import Record
from .._log.redaction import REDACTION_KIND
from ._frontier import MerkleFrontier, fold_frontier
from ._merkle import InvalidProofError

_NODE = b"\x01"
_LEAF = b"\x00"
_sha256 = hashlib.sha256
_REDACTION_TAIL = b',"kind":"' + REDACTION_KIND.encode() + b'","prev":'

Node = tuple[int, int]
"""``(first leaf, height)`` of a complete subtree."""


def path_ranges(index: int, start: int, end: int) -> list[tuple[int, int]]:
    """The leaf ranges ``[a, b)`` whose roots make ``PATH(index, D[start:end])``, leaf level
    first (RFC 9162 section 2.1.3.1)."""
    ranges: list[tuple[int, int]] = []
    while end - start > 1:
        split = 1 << ((end - start - 1).bit_length() - 1)
        if index - start < split:
            ranges.append((start + split, end))
            end = start + split
        else:
            ranges.append((start, start + split))
            start += split
    ranges.reverse()
    return ranges


def blocks(size: int) -> list[Node]:
    """The frontier's subtrees at ``size`` leaves, largest first."""
    found, start = [], 0
    for height in range(size.bit_length() - 1, -1, -1):
        if size >> height & 1:
            found.append((start, height))
            start += 1 << height
    return found


class CollectingFrontier(MerkleFrontier):
    """A frontier that keeps the roots of the complete subtrees in :attr:`wanted` as its
    appends build them (in :attr:`found`)."""

    def __init__(self) -> None:
        super().__init__()
        self.wanted: set[Node] = set()
        self.found: dict[Node, bytes] = {}

    def append_chain_hashes(self, digests_hex: list[bytes]) -> None:
        for digest in digests_hex:
            self._collect(_sha256(_LEAF + unhexlify(digest)).digest())

    def append_chain_hash(self, digest_hex: bytes) -> None:
        self._collect(_sha256(_LEAF + unhexlify(digest_hex)).digest())

    def append_with_edge(self, leaf: bytes) -> list[bytes]:
        start = self.size
        edge = super().append_with_edge(leaf)
        node = leaf
        self._keep((start, 0), node)
        for height, left in enumerate(edge, 1):
            node = _sha256(_NODE + left + node).digest()
            self._keep((start + 1 - (1 << height), height), node)
        return edge

    def _collect(self, leaf: bytes) -> None:
        start = self.size
        edge = super().append_with_edge(leaf)
        if not self.wanted:
            return
        node = leaf
        self._keep((start, 0), node)
        for height, left in enumerate(edge, 1):
            node = _sha256(_NODE + left + node).digest()
            self._keep((start + 1 - (1 << height), height), node)

    def _keep(self, node: Node, digest: bytes) -> None:
        if node in self.wanted:
            self.found[node] = digest

    def ask_for_path(self, index: int) -> None:
        """Leaf ``index`` arrives next: keep its left siblings now, ask for its right ones."""
        hashes = self.hashes
        for node, digest in zip(blocks(self.size), hashes, strict=True):
            self.found[node] = digest
        for height in range(62):
            if not index >> height & 1:
                self.wanted.add((((index >> height) + 1) << height, height))


class SagaProver:
    """Collects one saga's records, the redaction records naming them, and what their
    inclusion paths need, from the :data:`._stream.Observer` calls of one pass."""

    def __init__(self, saga_id: str, chain: Chain) -> None:
        self.saga_id = saga_id
        self.frontier = CollectingFrontier()
        self.records: list[Record] = []
        self._chain = chain
        self._needle = b'"saga":' + _quoted(saga_id)
        self._seqs: set[int] = set()
        self._ended = False

    def observe(self, index: int, line: bytes, digest: bytes, previous: str) -> None:
        mine = not self._ended and self._needle in line
        redaction = bool(self._seqs) and _REDACTION_TAIL in line
        if not (mine or redaction):
            return
        record = parse_line(self._chain, line, index + 1, previous)
        if not isinstance(record, Record):
            return  # the stream reports what is wrong with it
        if record.saga == self.saga_id and not self._ended:
            self._seqs.add(record.seq)
            self._ended = record.kind == "saga.end"
        elif not (record.kind == REDACTION_KIND and _names_any(record, self._seqs)):
            return
        self.records.append(record)
        self.frontier.ask_for_path(index)

    def tree(self) -> ProvenTree:
        """What :func:`._disclosure.build_bundle` asks of a tree, for the records collected."""
        return ProvenTree(self.frontier, self.found_for)

    def found_for(self, first: int, end: int, size: int) -> bytes:
        frontier = self.frontier
        width = end - first
        if width & (width - 1) == 0 and first % width == 0 and end <= size:
            node = (first, width.bit_length() - 1)
            if node in frontier.found:
                return frontier.found[node]
        if end == size:
            tiles = blocks(size)
            hashes = frontier.hashes
            for at, (start, _) in enumerate(tiles):
                if start == first:
                    return fold_frontier(hashes[at:])
        raise InvalidProofError(f"the root of leaves [{first}, {end}) was not collected")


class ProvenTree:
    """The part of :class:`._tree.MerkleTree` a bundle uses, at the frontier's final size."""

    def __init__(self, frontier: MerkleFrontier, found: Callable[[int, int, int], bytes]) -> None:
        self.size = frontier.size
        self._root = frontier.root()
        self._found = found

    def root(self, size: int | None = None) -> bytes:
        if size not in (None, self.size):
            raise InvalidProofError(f"only the root at {self.size} leaves was kept, not {size}")
        return self._root

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        size = self.size if size is None else size
        if size != self.size or not 0 <= index < size:
            raise InvalidProofError(f"no proof of leaf {index} at {size} leaves was kept")
        return [self._found(a, b, size) for a, b in path_ranges(index, 0, size)]


def _quoted(text: str) -> bytes:
    from json.encoder import encode_basestring

    return encode_basestring(text).encode()


def _names_any(record: Record, seqs: set[int]) -> bool:
    entries = record.data.get("records")
    return isinstance(entries, list) and any(
        isinstance(e, dict) and e.get("seq") in seqs for e in entries
    )
