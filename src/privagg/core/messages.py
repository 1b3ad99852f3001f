"""Message batches and the shuffler role.

A batch is a struct of aligned integer columns (one row a message), so one
device's output and a simulated population's output have the same shape.
"""

from __future__ import annotations

from dataclasses import dataclass

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

    def take(self, index: np.ndarray) -> "MessageBatch":
        return MessageBatch({name: col[index] for name, col in self.columns.items()})

    @staticmethod
    def concatenate(batches: list["MessageBatch"]) -> "MessageBatch":
        names = batches[0].columns
        return MessageBatch({name: np.concatenate([b[name] for b in batches]) for name in names})

    def check(self, ranges: dict[str, tuple[int, int]]) -> None:
        """Raise ParameterError unless each column ``name`` holds integers in [lo, hi)."""
        for name, (lo, hi) in ranges.items():
            if name not in self.columns:
                raise ParameterError("messages", f"a batch with columns {sorted(ranges)}", sorted(self.columns))
            col = self.columns[name]
            if col.size and not np.issubdtype(col.dtype, np.integer):
                raise ParameterError(f"message field {name!r}", f"integers in [{lo}, {hi})", f"dtype {col.dtype}")
            if col.size and (col.min() < lo or col.max() >= hi):
                bad = col.min() if col.min() < lo else col.max()
                raise ParameterError(f"message field {name!r}", f"integers in [{lo}, {hi})", bad)


def shuffle(batch: MessageBatch, rng: RNGLike = None) -> MessageBatch:
    """The shuffler: a uniformly random permutation of the batch.

    ``rng=None`` (deployment) draws the permutation from the secure generator.
    """
    return batch.take(resolve(rng).permutation(len(batch)))
