"""The analyzer's running aggregates as stored: a versioned NumPy ``.npz`` archive, read without pickle.

An aggregate is one of the protocols' plain-data classes (an implemented registry entry's analyzer's, as its
``agg_init`` declares it: :func:`privagg.protocols.registry.aggregate_types`); its stored form is an ``.npz``
archive (``numpy.savez``: a zip of ``.npy`` arrays, a format NumPy documents and keeps stable) of:

=====================  =========================================================================================
``format``             the string ``privagg aggregate``
``version``            1
``type``               the class's name, one of the registry's aggregate types
``fingerprint``        the parameters' fingerprint it was made under (absent if it has none)
``NAME``               a field holding an array, as that array (dtype and shape kept)
``NAME:int``           a field holding an integer, as a 0-d int64 array
``NAME:list``          a field holding a list (``:tuple``: a tuple), as its length; its items are stored
                       as ``NAME/0``, ``NAME/1``, ... by the same rules (the heavy-hitter aggregate's levels)
=====================  =========================================================================================

A field that is None is absent. It is read back with ``allow_pickle=False``: a database row cannot make the
analyzer run code, and anything else (an unknown type or version, a missing field, a pickle) is refused
with a ParameterError naming it.
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np

from ...errors import ParameterError
from ...protocols.registry import aggregate_types
from ...protocols.roles import FINGERPRINT

FORMAT, VERSION = "privagg aggregate", 1


def encode_aggregate(agg) -> bytes:
    """``agg``'s stored form (the module's table)."""
    types = aggregate_types()
    if types.get(type(agg).__name__) is not type(agg):
        raise ParameterError("aggregate", f"an aggregate of one of {', '.join(types)}", type(agg).__name__)
    arrays = {"format": np.array(FORMAT), "version": np.array(VERSION), "type": np.array(type(agg).__name__)}
    fingerprint = getattr(agg, FINGERPRINT, None)
    if fingerprint is not None:
        arrays["fingerprint"] = np.array(fingerprint)
    for field in dataclasses.fields(agg):
        _flatten(field.name, getattr(agg, field.name), arrays)
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def decode_aggregate(raw: bytes):
    """The aggregate stored as ``raw``."""
    try:
        archive = np.load(io.BytesIO(raw), allow_pickle=False)
        stored = {name: archive[name] for name in archive.files}
    except (ValueError, OSError, EOFError) as err:
        raise ParameterError("aggregate", f"a stored aggregate (a {FORMAT} .npz archive, no pickles)",
                             f"{len(raw)} bytes that are not ({err.__class__.__name__})") from None
    if str(stored.get("format", "")) != FORMAT or stored.get("version") is None or int(stored["version"]) != VERSION:
        raise ParameterError("aggregate", f"version {VERSION} of the {FORMAT} format",
                             f"{stored.get('format')!s} {stored.get('version')!s}")
    types = aggregate_types()
    cls = types.get(str(stored.get("type")))
    if cls is None:
        raise ParameterError("aggregate", f"a type among {', '.join(types)}", str(stored.get("type")))
    values = {}
    for field in dataclasses.fields(cls):
        value = _read(field.name, stored)
        if value is _ABSENT and field.default is not None:  # only a field that is None is left out
            raise ParameterError("aggregate", f"a {cls.__name__} with its field {field.name}", "none stored")
        if value is not _ABSENT:
            values[field.name] = value
    agg = cls(**values)
    if "fingerprint" in stored:
        setattr(agg, FINGERPRINT, str(stored["fingerprint"]))
    return agg


_ABSENT = object()


def _flatten(name: str, value, out: dict) -> None:
    if value is None:
        return
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise ParameterError("aggregate", "arrays of numbers", f"{name} of dtype object")
        out[name] = value
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        out[f"{name}:int"] = np.array(int(value), dtype=np.int64)
    elif isinstance(value, (list, tuple)):
        out[f"{name}:{type(value).__name__}"] = np.array(len(value), dtype=np.int64)
        for i, item in enumerate(value):
            _flatten(f"{name}/{i}", item, out)
    else:
        raise ParameterError("aggregate", "fields of arrays, integers, lists and tuples", f"{name}: "
                             f"{type(value).__name__}")


def _read(name: str, stored: dict):
    if name in stored:
        return np.array(stored[name])
    if f"{name}:int" in stored:
        return int(stored[f"{name}:int"])
    for kind in (list, tuple):
        if f"{name}:{kind.__name__}" in stored:
            items = [_read(f"{name}/{i}", stored) for i in range(int(stored[f"{name}:{kind.__name__}"]))]
            if any(item is _ABSENT for item in items):
                raise ParameterError("aggregate", f"every item of {name}", "some missing")
            return kind(items)
    return _ABSENT
