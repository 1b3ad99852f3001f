"""Item encoding: arbitrary items (ints, strings, bytes) -> the domain [B].

Integers already in [0, B) map to themselves; an integer outside [0, B) is an
error, never clipped. Strings and bytes map through a keyed BLAKE2b hash
(:mod:`hashlib`) to [B]. One encoder holds one kind of item: integers or text.

Labels come only from *public* items: the encoder remembers the original item
behind a code only when told the items are public (candidate lists, a public
dictionary), never for the users' own items -- printing those would publish
the private data next to a differential-privacy guarantee. Other text codes
are labelled ``#code``. Two public items that hash to one code are reported
together ("a|b") and flagged.

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

from ..errors import ParameterError, check_instance, check_integer, check_sequence, checked_methods, kind_of

KEY_BYTES = 32


def check_item_key(key: str) -> str:
    """A key given as hex (parameters' ``item_key``, ``--hash-key``): 1 to 64 bytes, BLAKE2b's range."""
    try:
        size = len(bytes.fromhex(key))
    except (TypeError, ValueError):
        size = 0
    if not 1 <= size <= 64:
        raise ParameterError("hash-key", "2 to 128 hex digits (a key of 1 to 64 bytes)", key)
    return key


def _is_text(value: str) -> bool:
    """Whether a str encodes as UTF-8 (a lone surrogate, as Python's surrogateescape leaves them, does not)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


CODES_MAX = 2**63  # the largest domain whose codes [0, B) fit int64

@checked_methods
class ItemEncoder:
    """Maps items into [domain_size] and public items' codes back to labels."""

    def __init__(self, domain_size: int, key: bytes | None = None, kind: str | None = None) -> None:
        self.domain_size = check_integer("domain", domain_size, 2)
        if self.domain_size > CODES_MAX:  # codes are int64 (2^64 - 1 was an OverflowError hashing text into it)
            raise ParameterError("domain", f"at most 2^63 = {CODES_MAX} for items encoded into codes (64-bit "
                                 "integers; the frequency protocols take at most 2^49, fe-hh's own values up to "
                                 "2^64)", self.domain_size)
        if key is not None:
            check_instance("key", key, (bytes, bytearray, memoryview), "1 to 64 bytes (a bytes object; a hex key: "
                           "bytes.fromhex(text))")
        self.key = secrets.token_bytes(KEY_BYTES) if key is None else bytes(key)
        if not 1 <= len(self.key) <= 64:
            raise ParameterError("key", "1 to 64 bytes", f"{len(self.key)} bytes")
        if not (kind is None or (isinstance(kind, str) and kind in ("integer", "text"))):
            raise ParameterError("kind", "integer or text", kind)
        self.kind: str | None = kind  # "integer" or "text": given, or fixed by the first encode
        self._labels: dict[int, list[Any]] = {}

    @classmethod
    def for_parameters(cls, parameters, kind: str | None = None) -> "ItemEncoder":
        """The encoder of a deployment: the domain and the public ``item_key`` (which must be set) of a protocol's
        parameters (``domain_size`` and ``item_key`` are all it reads of them)."""
        if not (hasattr(parameters, "domain_size") and hasattr(parameters, "item_key")):
            raise ParameterError("parameters", "a protocol's frozen parameters with an item key "
                                 "(privagg.calibrate(...) or privagg.load_parameters(json_text))", kind_of(parameters))
        if parameters.item_key is None:
            raise ParameterError("item_key", "set in the parameters (calibrate with item_key=...) to encode items "
                                 "that every party maps alike", None)
        return cls(parameters.domain_size, bytes.fromhex(parameters.item_key), kind)

    def _hash(self, item: str | bytes) -> int:
        data = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        digest = hashlib.blake2b(data, key=self.key, digest_size=16).digest()
        return int.from_bytes(digest, "big") % self.domain_size

    @property
    def shares_codes(self) -> bool:
        """Whether items other than the public ones can share a public item's code: text, hashed into [B]."""
        return self.kind == "text"

    def _set_kind(self, kind: str, field: str) -> None:
        if self.kind not in (None, kind):
            raise ParameterError(field, f"{self.kind} items, like the input", f"{kind} items")
        self.kind = kind

    def encode(self, items: Iterable[Any] | np.ndarray, field: str = "item", public: bool = False) -> np.ndarray:
        """Codes in [0, domain_size) for ``items`` (a sequence, numpy or Arrow array), as int64.

        ``field`` names the items in error messages; ``public=True`` (candidate
        lists, dictionaries) lets the encoder label their codes. Integer numpy
        arrays need numpy alone; anything else goes through Arrow.
        """
        if isinstance(items, np.ndarray) and np.issubdtype(items.dtype, np.integer):
            return self._encode_integers(items.ravel(), field)
        import pyarrow as pa

        if isinstance(items, (pa.Array, pa.ChunkedArray)):
            column = items
        else:
            # Arrow, not numpy, for everything else: numpy's bytes dtype drops trailing NUL bytes.
            check_sequence(field, items, "a sequence of items (integers, strings or bytes), one per user")
            values = items.ravel().tolist() if isinstance(items, np.ndarray) else list(items)
            if not values:
                return np.empty(0, dtype=np.int64)
            try:
                column = pa.array(values)
            except UnicodeEncodeError:  # a lone surrogate ('\ud800'): a str that is no text
                row = next(i for i, v in enumerate(values) if isinstance(v, str) and not _is_text(v))
                raise ParameterError(field, "text that UTF-8 encodes (no lone surrogates)", repr(values[row]),
                                     row) from None
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as err:
                raise ParameterError(field, "integers, strings or bytes (one type per input)", err) from None
        if len(column) == 0:
            return np.empty(0, dtype=np.int64)
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        if column.null_count:
            raise ParameterError(field, "a value for every user (no missing values)", f"{column.null_count} missing")
        if pa.types.is_integer(column.type):
            return self._encode_integers(column.to_numpy(), field)
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
                or pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
            raise ParameterError(field, "integers, strings or bytes", f"values of type {column.type}")
        self._set_kind("text", field)
        encoded = column.dictionary_encode()
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.unify_dictionaries().combine_chunks()
        uniques = encoded.dictionary.to_pylist()
        codes = np.fromiter((self._hash(item) for item in uniques), dtype=np.int64, count=len(uniques))
        if public:
            for code, item in zip(codes.tolist(), uniques):
                seen = self._labels.setdefault(code, [])
                if item not in seen:
                    seen.append(item)
        return codes[encoded.indices.to_numpy(zero_copy_only=False)]

    def _encode_integers(self, arr: np.ndarray, field: str) -> np.ndarray:
        self._set_kind("integer", field)
        if arr.size:
            lo, hi = int(arr.min()), int(arr.max())
            if lo < 0 or hi >= self.domain_size:
                raise ParameterError(field, f"integers in [0, {self.domain_size}) (the domain)", lo if lo < 0 else hi)
        return arr.astype(np.int64, copy=False)

    def check_code(self, code: Any) -> int:
        """``code`` as an int: a code of the domain [0, domain_size)."""
        return check_integer("code", code, 0, self.domain_size - 1)

    def label(self, code: int) -> int | str:
        """The public item behind ``code`` (items joined by '|' on a collision); ``#code`` if unknown."""
        code = self.check_code(code)
        if self.kind != "text":
            return code
        items = self._labels.get(code)
        if items is None:
            return f"#{code}"
        return "|".join(item if isinstance(item, str) else "0x" + item.hex() for item in items)

    def is_collision(self, code: int) -> bool:
        return len(self._labels.get(self.check_code(code), ())) > 1

    @property
    def item_key(self) -> str:
        """The key as parameters record it (hex)."""
        return self.key.hex()


@checked_methods
class CategoryEncoder(ItemEncoder):
    """Categorical items: the i-th of a public list of N categories is code i; any other item is an error.

    For the protocols whose users hold one of N known categories (the
    sampling + secret-sharing family). Every code is labelled with its
    category, since the list is public; integers in the data are matched as
    their decimal text. ``categories`` may also be a count N: the integers
    0..N-1 are then the categories, and other integers are errors.
    """

    def __init__(self, categories) -> None:
        if isinstance(categories, (int, np.integer)):
            super().__init__(int(categories), key=b"categories", kind="integer")
            self.categories = None
            return
        names = [str(c) for c in categories]
        if len(names) < 2:
            raise ParameterError("candidates", "a list of at least 2 categories", f"{len(names)} categories")
        index = {name: code for code, name in enumerate(names)}
        if len(index) < len(names):
            twice = next(name for code, name in enumerate(names) if index[name] != code)
            raise ParameterError("candidates", "distinct categories", f"{twice!r} listed twice")
        super().__init__(len(names), key=b"categories", kind="text")
        self.categories, self._index = names, index

    def _set_kind(self, kind: str, field: str) -> None:
        if self.categories is None and kind == "text":
            raise ParameterError(field, f"integers in [0, {self.domain_size}) (--domain N), or text categories listed "
                                 "with --candidates FILE", "text items")
        super()._set_kind(kind, field)

    def _hash(self, item: str | bytes) -> int:
        name = item if isinstance(item, str) else bytes(item).decode("utf-8", "replace")
        code = self._index.get(name)
        if code is None:
            raise ParameterError("item", f"one of the {len(self.categories)} categories of the list (--candidates)",
                                 repr(name))
        return code

    def _encode_integers(self, arr: np.ndarray, field: str) -> np.ndarray:
        if self.categories is None:
            return super()._encode_integers(arr, field)
        import pyarrow as pa

        return self.encode(pa.array([str(v) for v in arr.tolist()], type=pa.string()), field)

    def label(self, code: int) -> int | str:
        code = self.check_code(code)
        return code if self.categories is None else self.categories[code]

    def is_collision(self, code: int) -> bool:
        self.check_code(code)
        return False

    @property
    def shares_codes(self) -> bool:
        """False: each category has its own code."""
        return False

    @property
    def item_key(self) -> None:
        """None: categories are codes by their place in the public list, no key."""
        return None
