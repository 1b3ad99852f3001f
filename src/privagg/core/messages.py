"""Message batches, their declared layouts, and the shuffler role.

A batch is a struct of aligned integer columns (one row a message), so one
device's output and a simulated population's output have the same shape.
Each protocol declares its :class:`MessageLayout` once (column names,
dtypes, ranges); the layout validates batches at the analyzer boundary
(malformed rows are dropped and counted), gives ``bits_per_message``, and
converts batches to and from Arrow tables and Parquet files (pyarrow is
loaded only there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ParameterError
from .randomness import RNGLike, resolve


@dataclass(frozen=True)
class MessageBatch:
    """Aligned int64 columns, one row a message."""

    columns: dict[str, np.ndarray]

    def __post_init__(self) -> None:
        lengths = {name: col.size for name, col in self.columns.items()}
        if len(set(lengths.values())) > 1:
            raise ParameterError("message columns", "arrays of one length", lengths)

    def __len__(self) -> int:
        return next(iter(self.columns.values())).size if self.columns else 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def take(self, index: np.ndarray | slice) -> "MessageBatch":
        return MessageBatch({name: col[index] for name, col in self.columns.items()})

    @staticmethod
    def concatenate(batches: list["MessageBatch"]) -> "MessageBatch":
        names = batches[0].columns
        return MessageBatch({name: np.concatenate([b[name] for b in batches]) for name in names})


@dataclass(frozen=True)
class Column:
    """One message field: integers in [low, high), stored as ``dtype``."""

    name: str
    low: int
    high: int
    dtype: str = "int64"

    @property
    def bits(self) -> int:
        """Bits to send a value of this field: ceil(log2(high - low))."""
        return max(1, math.ceil(math.log2(self.high - self.low)))


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

    def validate(self, batch: MessageBatch) -> tuple[MessageBatch, int]:
        """(the well-formed rows as int64 columns, how many rows were dropped).

        A row is malformed when a field is missing, not an integer (a float
        with a fraction, NaN), or outside its range. Never raises on bad
        content: the analyzer counts what it dropped and goes on.
        """
        rows = len(batch)
        if any(name not in batch.columns for name in self.names):
            return self.empty(), rows
        keep = np.ones(rows, dtype=bool)
        columns = {c.name: np.asarray(batch[c.name]) for c in self.columns}
        for c in self.columns:
            col = columns[c.name]
            if np.issubdtype(col.dtype, np.integer):
                keep &= (col >= c.low) & (col < c.high)
            elif np.issubdtype(col.dtype, np.floating):
                with np.errstate(invalid="ignore"):
                    keep &= np.isfinite(col) & (col == np.floor(col)) & (col >= c.low) & (col < c.high)
            else:
                keep[:] = False
        if keep.all():
            return MessageBatch({name: col.astype(np.int64, copy=False) for name, col in columns.items()}), 0
        return MessageBatch({name: col[keep].astype(np.int64) for name, col in columns.items()}), int(rows - keep.sum())

    def empty(self) -> MessageBatch:
        return MessageBatch({name: np.empty(0, dtype=np.int64) for name in self.names})

    def to_arrow(self, batch: MessageBatch):
        """The batch as a :class:`pyarrow.Table` with the declared dtypes."""
        import pyarrow as pa

        return pa.table({c.name: pa.array(batch[c.name].astype(c.dtype, copy=False)) for c in self.columns})

    def from_arrow(self, table) -> MessageBatch:
        """A batch from an Arrow table; columns it lacks or has extra are left to :meth:`validate`."""
        return MessageBatch({name: table.column(name).to_numpy() for name in table.column_names})

    def write_parquet(self, batch: MessageBatch, path: str | Path) -> None:
        import pyarrow.parquet as pq

        pq.write_table(self.to_arrow(batch), path)

    def read_parquet(self, path: str | Path) -> MessageBatch:
        import pyarrow.parquet as pq

        return self.from_arrow(pq.read_table(path))


def shuffle(batch: MessageBatch, rng: RNGLike = None) -> MessageBatch:
    """The shuffler: a uniformly random permutation of the batch.

    ``rng=None`` (deployment) draws the permutation from the secure generator.
    """
    return batch.take(resolve(rng).permutation(len(batch)))
