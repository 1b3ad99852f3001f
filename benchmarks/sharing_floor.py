"""The floor under a DPDS or DPDG user's work, for bench part 12 (issue 47): the cryptographic and storage operations
a round cannot avoid, each timed here with the same library calls the parties make, and a user's CPU by round as
their sum over the operations the protocol asks of him (``floor_by_round``). A user's measured CPU over this floor
is what privagg's own code (encodings, checks, HTTP, JSON) costs on top.

Run alone: ``python benchmarks/sharing_floor.py [--users N] [--degree K]`` prints each operation's cost and the floor
per round for a DPDS user at n = N, N = 20 categories, on the complete graph or with K neighbours.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

CATEGORIES = 20


def _per_call(function, repeat: int) -> float:
    """CPU seconds per call of ``function()`` (this thread's CPU clock: on a shared host the wall clock counts the
    other processes' turns, which the users' CPU measured beside it does not): the best of 3 runs of ``repeat``
    calls (the floor, not the mean)."""
    best = float("inf")
    for _ in range(3):
        start = time.thread_time()
        for _ in range(repeat):
            function()
        best = min(best, (time.thread_time() - start) / repeat)
    return best


def floor_ops(parameters, holders: int) -> dict[str, float]:
    """CPU seconds per operation, as the parties call them (``parameters``: a DPDS or DPDG task's; ``holders``: the
    users a secret is shared among, n on the complete graph, k + 1 with k neighbours): an X25519 agreement with its HKDF
    (:class:`~privagg.protocols.sharing_parties.PairShares`), a ChaCha20 expansion to N field elements, HPKE's seal and
    open of a backup (X25519, AES-128-GCM), an Ed25519 signature made and checked (libsodium, as core/identity.py calls
    it; its public key loaded once: identity keeps the key objects; the load alone beside it), a Shamir split of a
    user's two secrets among ``holders``, and a row stored in SQLite (the relayed table's shape, 1,000 rows a
    transaction, WAL)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from privagg.core import identity, shamir
    from privagg.core.sharing import expand
    from privagg.protocols.sharing_messages import BACKUP, message_bytes
    from privagg.protocols.sharing_parties import PairShares
    from privagg.service.tasks import _private_key, _public_key, _suite

    rng = np.random.default_rng(0)
    mine, other = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    public = other.public_key().public_bytes_raw()
    pair = PairShares(parameters, mine.private_bytes_raw())
    suite, backup = _suite("x25519"), bytes(message_bytes(parameters, BACKUP))
    recipient = _public_key("x25519", public)
    sealed = suite.encrypt(backup, recipient, info=b"floor")
    opener = _private_key("x25519", other.private_bytes_raw())
    key = identity.generate()
    signature = identity.sign(key, b"floor", backup)
    verifier = identity.public_key(key)
    seed = bytes(32)
    ops = {
        "x25519 agreement + HKDF": _per_call(lambda: pair.seeds(public, 0, 1), 200),
        "ChaCha20 expansion, N elements": _per_call(lambda: expand(parameters.field, seed, parameters.domain_size),
                                                    500),
        "HPKE seal of a backup": _per_call(lambda: suite.encrypt(backup, recipient, info=b"floor"), 200),
        "HPKE open of a backup": _per_call(lambda: suite.decrypt(sealed, opener, info=b"floor"), 200),
        "Ed25519 signature made": _per_call(lambda: identity.sign(key, b"floor", backup), 200),
        "Ed25519 signature checked": _per_call(lambda: identity.verify(verifier, signature, b"floor", backup), 200),
        "Ed25519 public key loaded": _per_call(lambda: identity._public.__wrapped__(verifier), 200),
        "Shamir split of two secrets": _per_call(lambda: shamir.split(bytes(64), max(1, holders // 2 + 1), holders,
                                                                      rng), 5),
    }
    ops["SQLite row stored"] = _sqlite_row(len(sealed))
    return ops


def _sqlite_row(size: int, rows: int = 20_000) -> float:
    """CPU seconds per row inserted into a table shaped as the relayed messages' (task, round, sender, recipient, the
    sealed bytes, a signature), 1,000 rows a committed transaction, in WAL mode on a temporary file."""
    with tempfile.TemporaryDirectory() as folder:
        db = sqlite3.connect(os.path.join(folder, "floor.db"))
        db.execute("pragma journal_mode=wal")
        db.execute("create table relayed (task_id text, round int, sender int, recipient int, sealed blob, "
                   "signature blob, primary key (task_id, round, sender, recipient))")
        body, signature = bytes(size), bytes(64)
        start = time.process_time()
        for first in range(0, rows, 1000):
            with db:
                db.executemany("insert into relayed values (?, ?, ?, ?, ?, ?)",
                               [("t", 1, i, i + 1, body, signature) for i in range(first, first + 1000)])
        seconds = (time.process_time() - start) / rows
        db.close()
    return seconds


def floor_by_round(parameters, degree: int | None, ops: dict[str, float]) -> dict[str, float]:
    """A surviving user's floor CPU by round, in seconds, with k = ``degree`` neighbours (None: all n - 1): round 1
    his shares split and a backup sealed and signed for each neighbour; round 2 each neighbour's backup's signature
    checked and the backup opened, and his key message signed; round 3 each of the k + 1 pair keys' signatures
    checked, an agreement and two expansions per neighbour and his mask's; round 4 one signature; round 5 the
    signatures he checks (t of them on the complete graph; about k + t_k on a graph, the signers of his neighbours'
    neighbourhoods) and his reveal signed. Each round's message to the server is signed besides. The server's share
    of the work (a row per message, the release) is not in it."""
    from privagg.protocols.sharing_parties import threshold

    k = parameters.n_users - 1 if degree is None else degree
    t = threshold(parameters)
    signers = t if degree is None else min(parameters.n_users, k + t)
    expansion, sign = ops["ChaCha20 expansion, N elements"], ops["Ed25519 signature made"]
    check = ops["Ed25519 signature checked"]
    return {
        "1 advertise": ops["Shamir split of two secrets"] + k * (ops["HPKE seal of a backup"] + sign) + sign,
        "2 check": k * (check + ops["HPKE open of a backup"]) + sign,
        "3 masked sum": (k + 1) * check + k * (ops["x25519 agreement + HKDF"] + 2 * expansion) + expansion + sign,
        "4 consistency": 2 * sign,
        "5 reveal": signers * ops["Ed25519 signature checked"] + sign,
    }


def main() -> None:
    from privagg.protocols.registry import calibrate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--degree", type=int, default=None)
    args = parser.parse_args()
    parameters = calibrate("dpds", epsilon=1.0, delta=1e-6, n_users=args.users, domain_size=CATEGORIES,
                           min_count_fraction=0.01, degree=args.degree)
    holders = args.users if args.degree is None else args.degree + 1
    ops = floor_ops(parameters, holders)
    for name, seconds in ops.items():
        print(f"{name:34s} {seconds * 1e6:10.1f} us")
    rounds = floor_by_round(parameters, args.degree, ops)
    for name, seconds in rounds.items():
        print(f"floor, round {name:22s} {seconds * 1e3:10.2f} ms a user")
    print(f"floor, all rounds {'':17s} {sum(rounds.values()) * 1e3:10.2f} ms a user; x {args.users} users = "
          f"{sum(rounds.values()) * args.users:.1f} s of CPU")


if __name__ == "__main__":
    main()
