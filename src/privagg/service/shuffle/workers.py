"""Where the analyzer opens a batch's sealed messages: worker processes that exist for one batch and die with it.

What a message opens to is :func:`privagg.service.tasks.open_messages`'s business; this module only decides
where it runs: in the analyzer's own process for a small batch, else on ``workers`` processes started for
this batch alone (:class:`BatchWorkers`, :func:`batch_pool`).

**The key lives only as long as the batch.** The workers receive the task's private key with their share of
the batch, so a worker holds it while it opens. A pool kept alive between batches would keep copies of the
key in its workers' memory for the analyzer's lifetime, and freeing a Python ``bytes`` does not clear it
(the pickled argument, the unpickled key and the buffers around them stay in the freed heap until reused).
Instead each batch gets a fresh pool that is shut down once the batch is opened: the workers exit, and the
kernel reclaims their memory, copies of the key included (no process can read it again). Between batches no
worker exists, and only the analyzer's own process holds the key (it keeps each task's key loaded). At most ``workers``
worker processes exist at any time: batches are opened one at a time, as a shared pool would have queued
them. The price is starting the pool for each batch: about a third of a second on two cores (each spawned
interpreter imports NumPy, ``cryptography`` and the task's protocol), which is why a batch under
:data:`POOL_FROM` messages is opened in the analyzer's process: below that, two workers do not win the time
back (measured: 16,384 X25519 messages took 0.94 s in one process and 0.92 s on a fresh pool of two; 50,000
took 1.98 s on a fresh pool against 1.51 s on a pool kept warm, median of five). The Dask option
(``--dask-scheduler``) is different: its workers are long-lived, receive the key with every batch and are
inside the analyzer's trust boundary.

**No orphans.** A worker must not outlive the analyzer, even one killed with SIGKILL mid-batch (no shutdown
code runs then). Each worker, first thing in the pool's initializer (:func:`arm`):

* asks Linux to send it SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, through ctypes);
* then checks ``os.getppid()`` against the parent's pid it was given: a parent that died between the spawn
  and the ``prctl`` is caught here (the worker has been re-parented already) and the worker exits;
* and starts a watchdog thread that polls ``os.getppid()`` and exits the worker when the parent changes:
  the only guard where ``prctl`` does not exist (other systems), a second one on Linux.

Linux sends the parent-death signal when the *thread* that started the worker ends, not the process. A
per-batch pool is started, used and shut down within one call, by one thread that waits for it, so that
thread outlives its workers (a long-lived pool started from a short-lived request thread would have its
workers killed under it).

multiprocessing's **resource tracker** (a helper process that the first spawn-context pool starts, one per
analyzer, holding no key: it only hears the names of the pools' semaphores) exits when every holder of its
pipe has gone: the analyzer and its workers. As the workers die with the analyzer, so does the tracker.

tests/service/test_workers.py kills a real analyzer with SIGKILL while its workers hold the key and finds
no process of it left, and checks each guard alone.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

import numpy as np

from ..tasks import OpenedBatch, Task, open_messages

POOL_FROM = 16_384  # messages: a smaller batch is opened in the analyzer's process (a pool's start costs more)
CHUNKS_PER_WORKER = 4  # a batch is cut in this many chunks a worker, so that a slow worker delays it little
WATCHDOG_SECONDS = 0.25  # how often a worker checks that its parent lives
EXIT_ORPHANED = 70  # a worker's exit status when it finds its parent gone
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of the analyzer's memory is copied


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Have the kernel send ``sig`` to this process when its parent (thread) ends; False where it cannot
    (not Linux, no C library, or the call refused)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def _watch(parent: int, seconds: float) -> None:
    while True:
        time.sleep(seconds)
        if os.getppid() != parent:
            os._exit(EXIT_ORPHANED)  # the parent is gone: exit at once, key and all


def arm(parent: int, death_signal: bool = True, watchdog: float | None = WATCHDOG_SECONDS) -> None:
    """A worker's first step (the pool's initializer): die with the process ``parent`` (see the module's
    docstring). ``death_signal=False`` or ``watchdog=None`` leave a guard out, for tests of the other."""
    if death_signal:
        set_parent_death_signal()
    if os.getppid() != parent:  # the parent died before the signal was armed: nobody would send it
        os._exit(EXIT_ORPHANED)
    if watchdog is not None:
        threading.Thread(target=_watch, args=(parent, watchdog), name="parent watchdog", daemon=True).start()


@contextmanager
def batch_pool(workers: int, death_signal: bool = True,
               watchdog: float | None = WATCHDOG_SECONDS) -> Iterator[ProcessPoolExecutor]:
    """A pool of ``workers`` spawned processes that die with this one, shut down on leaving the block (its
    workers exit; chunks not started are cancelled if the block raised)."""
    pool = ProcessPoolExecutor(workers, mp_context=_SPAWN, initializer=arm,
                               initargs=(os.getpid(), death_signal, watchdog))
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


class BatchWorkers:
    """Opens batches on ``workers`` processes started for each batch and gone when it is opened (a batch under
    ``min_messages`` messages is opened in this process). Batches are opened one at a time.

    :meth:`shutdown` refuses further batches and cancels the chunks of the batch being opened that no worker
    has started, so that a stopping analyzer is not held up by a large batch.
    """

    def __init__(self, workers: int, min_messages: int = POOL_FROM, death_signal: bool = True,
                 watchdog: float | None = WATCHDOG_SECONDS) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.workers, self.min_messages = workers, min_messages
        self.death_signal, self.watchdog = death_signal, watchdog
        self._lock = threading.Lock()  # one batch at a time: never more than `workers` workers
        self._pool: ProcessPoolExecutor | None = None
        self._closed = False

    def open(self, task: Task, private_key: bytes, sealed: np.ndarray) -> list[OpenedBatch]:
        """Open the batch ``sealed`` (rows of bytes): one :class:`OpenedBatch` per chunk, in the batch's order."""
        if len(sealed) < self.min_messages:
            return [open_messages(task, private_key, sealed)]
        chunks = np.array_split(sealed, CHUNKS_PER_WORKER * self.workers)
        n = len(chunks)
        with self._lock:
            if self._closed:
                raise RuntimeError("the analyzer is stopping: no batch is opened")
            with batch_pool(min(self.workers, n), self.death_signal, self.watchdog) as pool:
                self._pool = pool
                try:
                    return list(pool.map(open_messages, [task] * n, [private_key] * n, chunks))
                finally:
                    self._pool = None

    def shutdown(self) -> None:
        self._closed = True
        pool = self._pool
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
