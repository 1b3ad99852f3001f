"""An accountant's evaluations kept on disk: a calibration made once per setting is read, not recomputed.

An accountant's value at given arguments (the blanket accountant's delta(eps) at a gamma and n; balls-into-bins'
calibration and its delta at a report's parameters, ``protocols/balls_into_bins.py``; fe-hh's level tails,
``protocols/heavy_hitters.py``; blanket-vector's E[1/c], ``protocols/privacy_blanket.py``) is a pure function of its arguments and of the code that computes it.
:func:`on_disk` keeps each value it computes, as the exact float (its hex form), in one JSON file per version of that
code: the file's name holds the SHA-256 of the sources it names, of numpy's and scipy's versions and of the
interpreter's, so a change to any of them reads a new, empty file and recomputes. A calibration replays its root finder over the kept values and returns the same
parameter to the bit; the privacy profile and the claim's check read theirs; and a command that finds every value it
needs imports no scipy (docs/privacy.md, "The blanket accountant", where the cache is described).

The file lives in ``$PRIVAGG_CACHE`` (a directory; ``off`` keeps nothing), else ``$XDG_CACHE_HOME/privagg``, else
``~/.cache/privagg``. It is read only if the user running the command owns it and no one else may write it (as ssh
reads its keys): a value planted there would change a calibration. A directory that cannot be made or written is no
error: each value is then computed, as without a cache.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

OFF = "off"
ENTRIES_MAX = 100_000  # a file holding more starts afresh (each calibration adds about twenty, 100 bytes each)
_loaded: dict[Path, dict[str, str]] = {}  # each file's values, read once a process


def directory() -> Path | None:
    """Where the cache files live (None: ``PRIVAGG_CACHE=off``)."""
    chosen = os.environ.get("PRIVAGG_CACHE")
    if chosen is not None:
        return None if chosen.strip().lower() in (OFF, "") else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "privagg"


@functools.lru_cache(maxsize=None)
def version(sources: tuple[str, ...]) -> str:
    """SHA-256 (16 hex digits) of the sources' bytes, numpy's and scipy's versions and the interpreter's."""
    digest = hashlib.sha256()
    for source in sources:
        digest.update(Path(source).read_bytes())
    scipy = importlib.util.find_spec("scipy")  # its version without importing it (0.2 s)
    if scipy is not None and scipy.submodule_search_locations:
        digest.update((Path(list(scipy.submodule_search_locations)[0]) / "version.py").read_bytes())
    digest.update(f"{np.__version__} {sys.version} {sys.platform}".encode())
    return digest.hexdigest()[:16]


def _trusted(path: Path) -> bool:
    """Whether ``path`` is the user's own and no one else's to write (where the system has owners)."""
    if not hasattr(os, "getuid"):
        return True
    status = path.stat()
    return status.st_uid == os.getuid() and not status.st_mode & 0o022


def _values(path: Path) -> dict[str, str]:
    """The file's values, read on first use (none if it is missing, unreadable, not JSON or not trusted)."""
    if path not in _loaded:
        try:
            values = json.loads(path.read_text()) if _trusted(path) and _trusted(path.parent) else {}
        except (OSError, ValueError):
            values = {}
        _loaded[path] = values if isinstance(values, dict) else {}
    return _loaded[path]


def _keep(path: Path, key: str, value: str) -> None:
    """Add one value to the file (merged with what another process may have added since; written whole, then
    renamed over it, so a reader never sees half a file). Any OSError leaves the cache as it was."""
    values = _values(path)
    if len(values) >= ENTRIES_MAX:
        values.clear()
    values[key] = value
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _trusted(path.parent):
            return
        if path.exists() and _trusted(path):
            try:
                values.update({k: v for k, v in json.loads(path.read_text()).items() if k not in values})
            except (ValueError, AttributeError):
                pass
        import tempfile  # only where a value is added

        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(handle, "w") as out:
            json.dump(values, out)
        os.replace(temporary, path)
    except OSError:
        pass


def holds(name: str, sources: tuple[str, ...]) -> bool:
    """Whether a file of ``name``'s values for this version of ``sources`` exists (a calibration is then likely to
    read its values, not compute them)."""
    folder = directory()
    return folder is not None and (folder / f"{name}-{version(sources)}.json").exists()


def on_disk(name: str, sources: tuple[str, ...]) -> Callable[[Callable[..., float]], Callable[..., float]]:
    """Keep a float function's values on disk, by its arguments' reprs (positional and keyword alike: every call
    of it must pass its arguments the same way to share values), in the file of ``name`` and the version of
    ``sources`` (module docstring)."""

    def wrap(function: Callable[..., float]) -> Callable[..., float]:
        @functools.wraps(function)
        def cached(*args, **kwargs) -> float:
            folder = directory()
            if folder is None:
                return function(*args, **kwargs)
            path = folder / f"{name}-{version(sources)}.json"
            key = function.__name__ + repr((args, sorted(kwargs.items())))
            kept = _values(path).get(key)
            if isinstance(kept, str):
                try:
                    return float.fromhex(kept)
                except ValueError:  # not a float's hex form: computed again, and kept right
                    pass
            value = function(*args, **kwargs)
            _keep(path, key, float(value).hex())
            return value

        cached.uncached = function
        return cached

    return wrap
