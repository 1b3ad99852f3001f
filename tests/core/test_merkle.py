"""The Merkle tree hashing the organisation's roster root is of (core/merkle.py): RFC 9162 / RFC 6962 §2.1, checked
against Certificate Transparency's published test vectors, and its inclusion proofs against every way a server could
bend one (another leaf or index, an index past the tree, a path cut short or made longer). The tree's size is not
the proof's to show (index 0 of 3 leaves and of 4 have the same path): the organisation signs it with the root."""

import pytest

from privagg.core import merkle

# the leaves of RFC 6962's reference tests (certificate-transparency, merkle_tree_test) and the roots they state
CT_LEAVES = [b"", b"\x00", b"\x10", b"\x20\x21", b"\x30\x31", b"\x40\x41\x42\x43", bytes(range(0x50, 0x58)),
             bytes(range(0x60, 0x70))]
CT_ROOTS = {1: "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            8: "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"}


def test_the_roots_are_certificate_transparencys():
    for size, root in CT_ROOTS.items():
        assert merkle.root(CT_LEAVES[:size]).hex() == root


def test_leaves_and_nodes_are_domain_separated():
    """A leaf holding two hashes is not the node over them (RFC 9162 §2.1.1's second-preimage defence)."""
    left, right = merkle.leaf_hash(b"a"), merkle.leaf_hash(b"b")
    assert merkle.root([b"a", b"b"]) == merkle.node_hash(left, right) != merkle.leaf_hash(left + right)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 8, 13, 16, 33, 1000])
def test_every_proof_checks_and_no_bent_one_does(size):
    leaves = [i.to_bytes(4, "big") for i in range(size)]
    tree = merkle.Tree(leaves)
    for index in range(size):
        proof = tree.proof(index)
        assert len(proof) <= (size - 1).bit_length()  # ceil(log2 size) hashes at most
        assert merkle.verify(leaves[index], index, size, proof, tree.root)
        assert not merkle.verify(b"another", index, size, proof, tree.root)
        assert not merkle.verify(leaves[index], index, size, proof + [bytes(32)], tree.root)  # extended
        if proof:
            assert not merkle.verify(leaves[index], index, size, proof[:-1], tree.root)  # truncated
            assert not merkle.verify(leaves[index], (index + 1) % size, size, proof, tree.root)  # another index
            assert not merkle.verify(leaves[index], index, size, [proof[0][:31]] + proof[1:], tree.root)
    assert not merkle.verify(leaves[0], size, size, tree.proof(0), tree.root)  # an index past the tree
