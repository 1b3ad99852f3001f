"""Merkle tree hashing as Certificate Transparency specifies it (RFC 9162 §2.1, as RFC 6962 §2.1 before it): the
roster the organisation signs is the root of a tree over its entries, so that a device checks the few entries it
needs, each with an inclusion proof of ceil(log2 n) hashes, against one signed root (service/round_tasks.py;
docs/privacy.md, "The roster a device downloads").

SHA-256 (hashlib), domain-separated: a leaf's hash is SHA-256(0x00 || leaf), an interior node's SHA-256(0x01 ||
left || right), so that no leaf can pass for a node (the second-preimage attack RFC 9162 §2.1.1 names). The tree of
n leaves splits at the largest power of two below n (MTH, §2.1.1); the inclusion proof of leaf m is its audit path
(PATH, §2.1.3.1), checked by the algorithm of §2.1.3.2, which refuses a proof of the wrong length (truncated,
extended) or for another index or tree size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

HASH_BYTES = 32
LEAF, NODE = b"\x00", b"\x01"


def leaf_hash(leaf: bytes) -> bytes:
    """SHA-256(0x00 || leaf)."""
    return hashlib.sha256(LEAF + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right)."""
    return hashlib.sha256(NODE + left + right).digest()


def _split(size: int) -> int:
    """The largest power of two below ``size`` (> 1): where MTH splits a tree of ``size`` leaves."""
    return 1 << ((size - 1).bit_length() - 1)


class Tree:
    """The Merkle tree of ``leaves`` (bytes each; at least one): its root (MTH) and each leaf's audit path. The
    subtrees' hashes are kept once computed (2n - 1 of them), so that a proof costs O(log n) after the root."""

    def __init__(self, leaves: Sequence[bytes]) -> None:
        if not leaves:
            raise ValueError("a Merkle tree needs at least one leaf")
        self.size = len(leaves)
        self._leaves = [leaf_hash(leaf) for leaf in leaves]
        self._nodes: dict[tuple[int, int], bytes] = {}
        self.root = self._hash(0, self.size)

    def _hash(self, start: int, end: int) -> bytes:
        """MTH(D[start:end])."""
        if end - start == 1:
            return self._leaves[start]
        found = self._nodes.get((start, end))
        if found is None:
            middle = start + _split(end - start)
            found = self._nodes[start, end] = node_hash(self._hash(start, middle), self._hash(middle, end))
        return found

    def proof(self, index: int) -> list[bytes]:
        """PATH(index, D[0:size]): the sibling hashes from the leaf up to the root."""
        if not 0 <= index < self.size:
            raise IndexError(index)
        path, start, end = [], 0, self.size
        while end - start > 1:
            middle = start + _split(end - start)
            if index < middle:
                path.append(self._hash(middle, end))
                end = middle
            else:
                path.append(self._hash(start, middle))
                start = middle
        return path[::-1]


def root(leaves: Sequence[bytes]) -> bytes:
    """MTH of ``leaves``."""
    return Tree(leaves).root


def verify(leaf: bytes, index: int, size: int, proof: Sequence[bytes], expected_root: bytes) -> bool:
    """Whether ``proof`` shows ``leaf`` at ``index`` of the tree of ``size`` leaves whose root is ``expected_root``
    (RFC 9162 §2.1.3.2): False for a proof of another length, another index or size, or any other leaf."""
    if not 0 <= index < size or any(not isinstance(p, bytes) or len(p) != HASH_BYTES for p in proof):
        return False
    fn, sn, r = index, size - 1, leaf_hash(leaf)
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == expected_root
