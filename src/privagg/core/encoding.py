"""Item encoding: arbitrary items (ints, strings, bytes) -> the domain [B].

Integers already in [0, B) map to themselves; an integer outside [0, B) is an
error, never clipped. Strings and bytes map through a keyed BLAKE2b hash
(:mod:`hashlib`) to [B]; the encoder remembers which original items it has
seen for each code, so estimates can be reported per original item. Two items
that hash to one code are reported together ("a|b") and flagged.

All clients and the analyzer of one run must share the encoder's ``key``; it
is no secret from the analyzer, it only keeps an adversary from choosing items
that collide in advance.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import ParameterError

KEY_BYTES = 32


class ItemEncoder:
    """Maps items into [domain_size] and back to labels."""

    def __init__(self, domain_size: int, key: bytes | None = None) -> None:
        if domain_size < 2:
            raise ParameterError("domain", "an integer >= 2", domain_size)
        self.domain_size = int(domain_size)
        self.key = secrets.token_bytes(KEY_BYTES) if key is None else bytes(key)
        if not 1 <= len(self.key) <= 64:
            raise ParameterError("key", "1 to 64 bytes", f"{len(self.key)} bytes")
        self._items: dict[int, list[Any]] = {}

    def _hash(self, item: str | bytes) -> int:
        data = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        digest = hashlib.blake2b(data, key=self.key, digest_size=16).digest()
        return int.from_bytes(digest, "big") % self.domain_size

    def encode(self, items: Iterable[Any] | np.ndarray | pa.Array | pa.ChunkedArray, field: str = "item") -> np.ndarray:
        """Codes in [0, domain_size) for ``items`` (a sequence, numpy or Arrow array), as int64.

        ``field`` names the items in error messages.
        """
        if isinstance(items, (pa.Array, pa.ChunkedArray)):
            column = items
        else:
            arr = np.asarray(items if isinstance(items, np.ndarray) else list(items))
            if arr.size == 0:
                return np.empty(0, dtype=np.int64)
            if np.issubdtype(arr.dtype, np.integer):
                return self._encode_integers(arr.ravel(), field)
            try:
                column = pa.array(arr.ravel(), from_pandas=False)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
                raise ParameterError(field, "integers, strings or bytes (one type per input)", err) from None
        if column.null_count:
            raise ParameterError(field, "a value for every user (no missing values)", f"{column.null_count} missing")
        if pa.types.is_integer(column.type):
            return self._encode_integers(column.to_numpy(), field)
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
                or pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
            raise ParameterError(field, "integers, strings or bytes", f"values of type {column.type}")
        encoded = column.dictionary_encode()
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.unify_dictionaries().combine_chunks()
        codes = np.empty(len(encoded.dictionary), dtype=np.int64)
        for i, item in enumerate(encoded.dictionary.to_pylist()):
            code = self._hash(item)
            codes[i] = code
            seen = self._items.setdefault(code, [])
            if item not in seen:
                seen.append(item)
        return codes[encoded.indices.to_numpy(zero_copy_only=False)]

    def _encode_integers(self, arr: np.ndarray, field: str) -> np.ndarray:
        if arr.size:
            lo, hi = int(arr.min()), int(arr.max())
            if lo < 0 or hi >= self.domain_size:
                raise ParameterError(field, f"integers in [0, {self.domain_size}) (the domain)", lo if lo < 0 else hi)
        return arr.astype(np.int64, copy=False)

    def label(self, code: int) -> Any:
        """The original item behind ``code`` (items joined by '|' on a collision)."""
        items = self._items.get(int(code))
        if items is None:
            return int(code)
        return items[0] if len(items) == 1 else "|".join(map(str, items))

    def is_collision(self, code: int) -> bool:
        return len(self._items.get(int(code), ())) > 1
