"""Many rows a user: the rows grouped by user and bounded, in bounded memory (docs/privacy.md, "Many rows a user").

Each row's user is hashed to a 64-bit key (:func:`user_keys`) and its item to a code, block by block as the
file readers stream them. The (user, code) records are then grouped by user: in memory when they fit the
caller's budget, else hashed to partitions on disk by the top bits of the user key (each partition a range of
keys, so the users come out in the same order either way), each partition grouped in memory in turn. Each
user's distinct codes are ranked by a keyed hash of (user, code) with the run's key and the first L kept
(:func:`bound_codes`): a uniformly random choice of L of them that depends on the user's own rows only, and the
same whichever way the records were grouped.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ParameterError
from .blocks import _Block, _without_missing
from .files import InputFormat

if TYPE_CHECKING:
    import pyarrow as pa

NO_ITEM = -1  # the code of a row whose item was missing and dropped: its user must have another
RECORD = np.dtype([("user", np.uint64), ("code", np.int64)])
GROUPING_FACTOR = 6  # bytes held while grouping in memory, per record byte (the records, sorts' indices, copies)
PARTITIONS_MAX = 1024


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (Steele, Lea and Flood 2014): a bijection of 64-bit words whose outputs look
    independent and uniform for distinct inputs."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def user_keys(values: pa.Array) -> np.ndarray:
    """A 64-bit key per user id: integers mixed, anything else as text hashed by BLAKE2b (two users share a key
    with probability about n^2 / 2^65: 3 x 10^-10 at 10^5 users)."""
    import hashlib

    import pyarrow as pa

    if pa.types.is_integer(values.type):
        return _mix(values.to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64))
    if pa.types.is_dictionary(values.type):
        values = values.cast(values.type.value_type)
    if not pa.types.is_string(values.type):
        values = values.cast(pa.string())
    encoded = values.dictionary_encode()
    uniques = np.fromiter((int.from_bytes(hashlib.blake2b(u.encode(), digest_size=8).digest(), "little")
                           for u in encoded.dictionary.to_pylist()), dtype=np.uint64, count=len(encoded.dictionary))
    return uniques[encoded.indices.to_numpy(zero_copy_only=False)]


def user_records(blocks: Iterable[_Block], fmt: InputFormat, encode, field: str, user_field: str,
                 source: Path | str, user_source: Path | str) -> Iterator[np.ndarray]:
    """The (user, code) records of ``blocks`` (each carrying its rows' users): a row without a user is an error
    naming it (of ``user_source``: a file, or a frame's user column); a row without an item is refused or
    (``missing="drop"``) kept as :data:`NO_ITEM`, so that a user left with none is found when grouping;
    ``encode(block)``: the codes of a block's items."""
    for block in blocks:
        users = block.users
        if users.null_count:
            row = int(np.flatnonzero(users.is_null().to_numpy(zero_copy_only=False))[0])
            raise ParameterError(user_field, "a user on every row", f"nothing on {block.where(row, user_source)}")
        keys = user_keys(users)
        kept, lost = _without_missing(block, fmt, field, source)
        records = np.empty(len(keys), dtype=RECORD)
        records["user"] = keys
        records["code"] = NO_ITEM
        if lost:
            records["code"][kept.kept] = encode(kept)
        else:
            records["code"] = encode(kept)
        yield records


@dataclass
class Grouped:
    """Each user's bounded codes (``codes``: n rows of L, in the users' key order, padded with ``pad``), how many
    users held more than L distinct ones (``truncated``), the records read, and the partitions used (0: in
    memory)."""

    codes: np.ndarray
    truncated: int
    rows: int
    partitions: int

    @property
    def n_users(self) -> int:
        return len(self.codes)


def group_items(records: Iterable[np.ndarray], reports: int, pad: int, rank_key: int, budget: int,
                rows: int, user_field: str) -> Grouped:
    """:func:`bound_codes` over all ``records``, grouped in memory when about ``rows`` records fit ``budget``
    bytes, else through partitions on disk (a private temporary folder, removed after)."""
    need = rows * RECORD.itemsize * GROUPING_FACTOR
    if need <= budget:
        parts = list(records)
        data = np.concatenate(parts) if parts else np.empty(0, dtype=RECORD)
        codes, truncated, lost = bound_codes(data, reports, pad, rank_key)
        _check_lost(lost, user_field)
        return Grouped(codes, truncated, len(data), 0)
    bits = min(int(math.ceil(math.log2(need / max(budget, 1)))) + 1, int(math.log2(PARTITIONS_MAX)))
    folder = Path(tempfile.mkdtemp(prefix="privagg-users-"))  # mode 0700: the users' raw data
    try:
        files = [(folder / f"{p}.bin").open("wb") for p in range(1 << bits)]
        count = 0
        for part in records:
            count += len(part)
            which = (part["user"] >> np.uint64(64 - bits)).astype(np.int64)
            order = np.argsort(which, kind="stable")
            bounds = np.searchsorted(which[order], np.arange((1 << bits) + 1))
            for p in range(1 << bits):
                if bounds[p] < bounds[p + 1]:
                    files[p].write(part[order[bounds[p]:bounds[p + 1]]].tobytes())
        for f in files:
            f.close()
        out, truncated, lost = [], 0, 0
        for p in range(1 << bits):
            codes, cut, gone = bound_codes(np.fromfile(folder / f"{p}.bin", dtype=RECORD), reports, pad, rank_key)
            out.append(codes)
            truncated, lost = truncated + cut, lost + gone
        _check_lost(lost, user_field)
        return Grouped(np.concatenate(out), truncated, count, 1 << bits)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _check_lost(lost: int, user_field: str) -> None:
    if lost:
        raise ParameterError(user_field, "users with an item on one row at least (--missing drop leaves out rows; a "
                             "user with no item left would be left out, and n would count the data)",
                             f"{lost} users with no item")


def bound_codes(records: np.ndarray, reports: int, pad: int, rank_key: int) -> tuple[np.ndarray, int, int]:
    """(each user's first ``reports`` = L distinct codes by rank, an (n, L) array in the users' key order padded
    with ``pad``; how many users held more than L; how many held no code, only :data:`NO_ITEM` rows).

    A code's rank is a keyed hash of (user, code) with ``rank_key``: for each user a uniformly random order of
    his distinct codes, independent of every other user's rows, whatever the records' order or grouping."""
    users, codes = records["user"], records["code"]
    everyone = np.unique(users)
    held = codes != NO_ITEM
    users, codes = users[held], codes[held]
    order = np.lexsort((codes, users))
    users, codes = users[order], codes[order]
    distinct = np.ones(users.size, dtype=bool)
    distinct[1:] = (users[1:] != users[:-1]) | (codes[1:] != codes[:-1])
    users, codes = users[distinct], codes[distinct]
    rank = _mix(_mix(users ^ np.uint64(rank_key)) ^ codes.view(np.uint64))
    order = np.lexsort((rank, users))
    users, codes = users[order], codes[order]
    starts = np.flatnonzero(np.r_[True, users[1:] != users[:-1]]) if users.size else np.empty(0, dtype=np.int64)
    counts = np.diff(np.r_[starts, users.size])
    which = np.repeat(np.arange(starts.size), counts)
    position = np.arange(users.size) - np.repeat(starts, counts)
    keep = position < reports
    out = np.full((starts.size, reports), pad, dtype=np.int64)
    out[which[keep], position[keep]] = codes[keep]
    return out, int((counts > reports).sum()), int(everyone.size - starts.size)


def run_key(rng) -> int:
    """The bounding's key, drawn from the run's randomness ``rng``."""
    return int(rng.integers(0, 2**63, dtype=np.int64))
