"""Message batches, their declared layouts, and the shuffler role.

A batch is a struct of aligned integer columns (one row a message), so one
device's output and a simulated population's output have the same shape.
Each protocol declares its :class:`MessageLayout` once (column names and
ranges); each column's storage dtype is the smallest integer type holding
its range, so FE1's messages at B = 2^24 take 12 bytes, not 24. The layout
validates batches at the analyzer boundary (malformed rows are dropped and
counted), gives ``bits_per_message``, and converts batches to and from Arrow
tables and Parquet files (pyarrow is loaded only there).

A simulated population is held row-major (:meth:`MessageBatch.from_records`:
one structured array whose fields are the columns), so that the shuffler
permutes it in place.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import (ParameterError, check_instance, check_integer, check_sequence, checked_arguments, checked_methods,
                      kind_of)
from .randomness import RNGLike, resolve

SLICE_ROWS = 1 << 21  # rows an analyzer validates and counts at a time: its scratch memory follows a slice


@checked_methods
@dataclass(frozen=True)
class MessageBatch:
    """Aligned integer columns, one row a message.

    ``records``: the structured array whose fields the columns are, when the
    batch is stored row-major (:meth:`from_records`); :func:`shuffle` then
    moves whole rows in place instead of gathering each column.

    ``fingerprint``: the parameters' fingerprint a client stamped on the batch
    (:func:`privagg.protocols.roles.parameters_fingerprint`); an analyzer of
    other parameters refuses it. None (read from a file): not checked.
    """

    columns: dict[str, np.ndarray]
    records: np.ndarray | None = field(default=None, repr=False, compare=False)
    fingerprint: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_instance("columns", self.columns, dict, "a dict of column name -> 1-D numpy array (one row a message)")
        odd = next((name for name, col in self.columns.items()
                    if not isinstance(name, str) or not isinstance(col, np.ndarray) or col.ndim != 1), None)
        if odd is not None:
            col = self.columns[odd]
            shown = f"shape {col.shape}" if isinstance(col, np.ndarray) else kind_of(col)
            raise ParameterError("columns", "a dict of column name (a string) -> 1-D numpy array",
                                 f"{odd!r}: {shown}")
        if self.fingerprint is not None:
            check_instance("fingerprint", self.fingerprint, str, "the parameters' fingerprint (a string) or None")
        if self.records is not None and not (isinstance(self.records, np.ndarray) and self.records.dtype.names):
            raise ParameterError("records", "None, or the structured numpy array whose fields are the columns",
                                 kind_of(self.records))
        lengths = {name: col.size for name, col in self.columns.items()}
        if len(set(lengths.values())) > 1:
            raise ParameterError("message columns", "arrays of one length", lengths)

    @classmethod
    def from_records(cls, records: np.ndarray, fingerprint: str | None = None) -> "MessageBatch":
        """A batch whose columns are the fields of the structured array ``records`` (views, no copy)."""
        if not isinstance(records, np.ndarray) or records.dtype.names is None:
            raise ParameterError("records", "a structured numpy array (one field a column)",
                                 f"dtype {records.dtype}" if isinstance(records, np.ndarray) else kind_of(records))
        return cls({name: records[name] for name in records.dtype.names}, records, fingerprint)

    def __reduce__(self):
        # Pickled (to a Dask worker) as its records, so that the columns stay views of them after loading.
        if self.records is not None:
            return MessageBatch.from_records, (self.records, self.fingerprint)
        return MessageBatch, (self.columns, None, self.fingerprint)

    def with_fingerprint(self, fingerprint: str | None) -> "MessageBatch":
        """The same columns (no copy), stamped with ``fingerprint``."""
        return MessageBatch(self.columns, self.records, fingerprint)

    def __len__(self) -> int:
        return next(iter(self.columns.values())).size if self.columns else 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def take(self, index: np.ndarray | slice) -> "MessageBatch":
        """The rows ``index`` selects (a slice, integer positions or a boolean mask)."""
        if not isinstance(index, (slice, np.ndarray, list, tuple, range)):
            raise ParameterError("index", "a slice, integer positions or a boolean mask", kind_of(index))
        if self.records is not None:
            return MessageBatch.from_records(self.records[index], self.fingerprint)
        return MessageBatch({name: col[index] for name, col in self.columns.items()}, None, self.fingerprint)

    def slices(self, rows: int = SLICE_ROWS) -> Iterator["MessageBatch"]:
        """Consecutive views of at most ``rows`` rows: what bounds an analyzer's scratch memory."""
        rows = check_integer("rows", rows, 1)
        for lo in range(0, len(self), rows):
            yield self.take(slice(lo, lo + rows))

    @staticmethod
    def concatenate(batches: list["MessageBatch"]) -> "MessageBatch":
        batches = list(check_sequence("batches", batches, "a list of MessageBatch"))
        if not batches:
            raise ParameterError("batches", "at least one MessageBatch to concatenate", "an empty list")
        for batch in batches:
            check_batch(batch, "batches")
        names = batches[0].columns
        other = next((b for b in batches if sorted(b.columns) != sorted(names)), None)
        if other is not None:
            raise ParameterError("batches", f"batches with one set of columns ({', '.join(names) or 'none'})",
                                 f"a batch with the columns {', '.join(other.columns) or 'none'}")
        stamps = {b.fingerprint for b in batches} - {None}
        if len(stamps) > 1:
            raise ParameterError("messages", "batches made with one set of parameters to concatenate",
                                 f"batches of {', '.join(sorted(stamps))}")
        return MessageBatch({name: np.concatenate([b[name] for b in batches]) for name in names}, None,
                            stamps.pop() if stamps else None)


def check_batch(batch, field: str = "messages") -> MessageBatch:
    """``batch`` if it is a MessageBatch; else a ParameterError naming ``field``."""
    return check_instance(field, batch, MessageBatch, "a privagg.MessageBatch (the clients' messages: "
                          "privagg.client(params).randomize(codes))")


@dataclass(frozen=True)
class Column:
    """One message field: integers in [low, high)."""

    name: str
    low: int
    high: int

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ValueError(f"column {self.name}: low must be below high, got [{self.low}, {self.high})")

    @property
    def bits(self) -> int:
        """Bits to send a value of this field: ceil(log2(high - low))."""
        return max(1, math.ceil(math.log2(self.high - self.low)))

    @property
    def dtype(self) -> np.dtype:
        """The smallest integer dtype holding [low, high): unsigned unless low < 0.

        Derived from the range, so that storage follows the parameters: a
        simulated population is held in these dtypes and written to Parquet
        with them.
        """
        kind = "u" if self.low >= 0 else "i"
        for size in (1, 2, 4, 8):
            info = np.iinfo(f"{kind}{size}")
            if info.min <= self.low and self.high - 1 <= info.max:
                return np.dtype(f"{kind}{size}")
        raise ValueError(f"column {self.name}: [{self.low}, {self.high}) does not fit a 64-bit integer")


@dataclass(frozen=True)
class MessageLayout:
    """The declared shape of one protocol's messages."""

    columns: tuple[Column, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def bits_per_message(self) -> int:
        return sum(c.bits for c in self.columns)

    @property
    def record_dtype(self) -> np.dtype:
        """One message as a packed row of the columns' dtypes (row-major storage of a population)."""
        return np.dtype([(c.name, c.dtype) for c in self.columns])

    def batch(self, columns: dict[str, np.ndarray]) -> MessageBatch:
        """``columns`` in the declared dtypes; their values must already lie in range (a client's own output)."""
        return MessageBatch({c.name: np.asarray(columns[c.name]).astype(c.dtype, copy=False) for c in self.columns})

    def validate(self, batch: MessageBatch) -> tuple[MessageBatch, int]:
        """(the well-formed rows in the declared dtypes, how many rows were dropped).

        A row is malformed when a field is missing, not an integer (a float
        with a fraction, NaN), or outside its range. Integer columns of any
        dtype are accepted; a batch already in the declared dtypes with no
        malformed row comes back without a copy. Never raises on bad
        content: the analyzer counts what it dropped and goes on.
        """
        rows = len(batch)
        if any(name not in batch.columns for name in self.names):
            return self.empty(), rows
        keep = np.ones(rows, dtype=bool)
        columns = {c.name: np.asarray(batch[c.name]) for c in self.columns}
        for c in self.columns:
            col = columns[c.name]
            if np.issubdtype(col.dtype, np.unsignedinteger) and c.low <= 0:  # col >= low holds: one pass less
                keep &= col < c.high
            elif np.issubdtype(col.dtype, np.integer):
                keep &= (col >= c.low) & (col < c.high)
            elif np.issubdtype(col.dtype, np.floating):
                with np.errstate(invalid="ignore"):
                    keep &= np.isfinite(col) & (col == np.floor(col)) & (col >= c.low) & (col < c.high)
            else:
                keep[:] = False
        if keep.all():
            return self.batch(columns), 0
        return self.batch({name: col[keep] for name, col in columns.items()}), int(rows - keep.sum())

    def empty(self) -> MessageBatch:
        return MessageBatch({c.name: np.empty(0, dtype=c.dtype) for c in self.columns})

    def to_arrow(self, batch: MessageBatch):
        """The batch as a :class:`pyarrow.Table` with the declared dtypes (values must lie in range)."""
        import pyarrow as pa

        return pa.table({name: pa.array(col) for name, col in self.batch(batch.columns).columns.items()})

    def from_arrow(self, table) -> MessageBatch:
        """A batch from an Arrow table; columns it lacks or has extra are left to :meth:`validate`."""
        return MessageBatch({name: table.column(name).to_numpy() for name in table.column_names})

    def write_parquet(self, batch: MessageBatch, path: str | Path) -> None:
        import pyarrow.parquet as pq

        pq.write_table(self.to_arrow(batch), path)

    def read_parquet(self, path: str | Path) -> MessageBatch:
        import pyarrow.parquet as pq

        return self.from_arrow(pq.read_table(path))

    def check_columns(self, names, where: str) -> None:
        """A stored partition (``where``) must hold exactly this layout's columns: ``privagg analyze`` checks every
        partition's schema first, so that another layout's file is an error naming it rather than a partition of
        'malformed' messages dropped (:meth:`validate`, the library's path, still counts them)."""
        names = list(names)
        if sorted(names) != sorted(self.names):
            raise ParameterError("messages", f"partitions with the columns {', '.join(self.names)} (the parameters' "
                                 "message layout)", f"{where} with the columns {', '.join(names) or 'none'}")


@checked_arguments
def shuffle(batch: MessageBatch, rng: RNGLike = None) -> MessageBatch:
    """The shuffler: permutes the batch's messages uniformly at random, in place, and returns it.

    The permutation is Fisher-Yates with exact bounded integers
    (:meth:`numpy.random.Generator.shuffle`) drawn from ``rng``; ``None``
    (deployment) draws from the secure generator. A row-major batch (a
    simulated population) has its rows swapped in its own buffer: no index
    array and no second copy of the messages, which at 5 x 10^7 users is
    what keeps a simulation within memory. Other batches get
    ``rng.permutation(len(batch))`` applied to every column; it makes the
    same draws, so one generator state gives one permutation either way.
    The shuffler owns what it receives: the caller's batch is the shuffled one.
    """
    rng = resolve(rng)
    if batch.records is not None:
        rng.shuffle(batch.records)
    else:
        order = rng.permutation(len(batch))
        for column in batch.columns.values():
            column[...] = column[order]
    return batch
