"""What the demos of the multi-round services share (``privagg demo-service dpds|dpdg|tss|tss-collusion``): the
users' devices (:class:`Devices`: their SDK clients, in worker processes at large n), the demo's seeded dropout plan
(not privacy randomness) and the task's minimum of survivors, and the traffic table's rows beside Table I (paper
reference §4).
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from ..errors import ParameterError, check_integer
from ..privacy.neighbour_graph import dropouts_of

THREADS = 16  # users' requests in flight at once, in all the demo's processes
USERS_PER_PROCESS = 1000  # a worker process's start (its imports: about 0.3 s of CPU) is not worth it for fewer users


def processes_for(users: int) -> int:
    """How many processes run ``users`` devices: one per :data:`USERS_PER_PROCESS` users, at least one (the demo's
    own: no worker), at most one per core. One interpreter runs one thread at a time, and the users' HPKE seals,
    key agreements and signatures are most of a demo's CPU: in one process they leave the second core to the
    server alone (docs/benchmarks.md part 16)."""
    return max(1, min(os.cpu_count() or 1, users // USERS_PER_PROCESS))


def _cpu() -> float:
    """This process's CPU seconds (user and system)."""
    times = os.times()
    return times.user + times.system


class _Shard:
    """Some of the demo's users, each an SDK client made by ``fetch`` (his class's, with the task's URL, id and
    the organisation's key), whose calls run ``threads`` at a time in the process that holds them; ``cpu``: each
    user's CPU seconds in his calls (his thread's time)."""

    def __init__(self, classes: dict[int, type], url: str, task_id: str, organisation_key: bytes,
                 threads: int) -> None:
        self.pool = ThreadPoolExecutor(threads)
        self.cpu = dict.fromkeys(classes, 0.0)
        self.clients = dict(zip(classes, self.pool.map(
            lambda user: classes[user].fetch(url, task_id, organisation_key=organisation_key), classes)))

    def call(self, method: str, calls: list[tuple[int, tuple]]) -> tuple[list, float]:
        """``clients[i].method(*args)`` for each (i, args) of ``calls``, their results in that order, and this
        process's CPU seconds so far."""
        def one(call):
            start = time.thread_time()
            try:
                return getattr(self.clients[call[0]], method)(*call[1])
            finally:
                self.cpu[call[0]] += time.thread_time() - start

        return list(self.pool.map(one, calls)), _cpu()


def _worker(descriptor: int) -> None:
    """A worker process (:class:`Devices`) over the connection at file ``descriptor``: a :class:`_Shard` made of
    the first message's arguments, each (method, calls) received run and answered with (True, its results and this
    process's CPU) or (False, the error, which the demo raises as if its own process had); None ends it with the
    clients and their CPU. A demo that ended first (the connection closed) ends it."""
    from multiprocessing.connection import Connection

    connection = Connection(descriptor)
    try:
        try:
            shard = _Shard(*connection.recv())
        except Exception as error:
            return _answer(connection, (False, error))
        _answer(connection, (True, ([], _cpu())))
        while (command := connection.recv()) is not None:
            try:
                answer = True, shard.call(*command)
            except Exception as error:
                answer = False, error
            _answer(connection, answer)
        shard.pool.shutdown()
        _answer(connection, (True, (shard.clients, shard.cpu)))
    except (EOFError, BrokenPipeError):
        pass


class DevicesLost(RuntimeError):
    """A worker process of the demo's users ended before it answered (killed, out of memory): the demo cannot go
    on without its users."""


def _answer(connection, answer: tuple) -> None:
    try:
        connection.send(answer)
    except (EOFError, BrokenPipeError):
        raise
    except Exception:  # an error that does not cross processes: its type and message do
        connection.send((False, RuntimeError(f"{type(answer[1]).__name__}: {answer[1]}")))


class Devices:
    """The demo's users' devices, one SDK client each (``classes[i]``: user i's client class, fetching the task at
    ``url`` and checking it under ``organisation_key``), run by ``processes`` processes (:func:`processes_for`):
    the demo's own at 1, else as many workers, each holding every ``processes``-th user, :data:`THREADS` requests in
    flight among them. :meth:`call` runs a method on some users; :meth:`cpu` is the users' CPU seconds so far in
    every process that runs them; :meth:`close` gives back the clients (in user order) and each user's CPU seconds
    in his calls."""

    def __init__(self, classes: list[type], url: str, task_id: str, organisation_key: bytes,
                 processes: int | None = None) -> None:
        processes = processes_for(len(classes)) if processes is None else check_integer("processes", processes, 1, 64)
        self.users, self.start, self.workers, self.shard, self.worker_cpu = len(classes), _cpu(), [], None, {}
        self.processes = processes
        shards = [{i: classes[i] for i in range(w, len(classes), processes)} for w in range(processes)]
        arguments = url, task_id, organisation_key, max(1, THREADS // processes)
        if processes == 1:
            self.shard = _Shard(shards[0], *arguments)
            return
        import socket
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        # a process of its own, not multiprocessing's spawn: that runs the caller's main module again, which a
        # script without an ``if __name__ == "__main__"`` guard does not survive. In a session of its own, so that
        # a terminal's Ctrl-C reaches the demo alone, which ends the workers (:meth:`__exit__`)
        try:
            for shard in shards:
                mine, theirs = socket.socketpair()
                worker = subprocess.Popen([sys.executable, "-c", "import sys; from privagg.service.round_demo import "
                                           "_worker; _worker(int(sys.argv[1]))", str(theirs.fileno())],
                                          pass_fds=(theirs.fileno(),), start_new_session=True)
                theirs.close()
                connection = Connection(mine.detach())
                self.workers.append((worker, connection))
                self._send(len(self.workers) - 1, (shard, *arguments))
            self._answers(range(processes))
        except BaseException:  # a task the devices could not fetch: no worker outlives the error
            self.__exit__()
            raise

    def _send(self, w: int, command) -> None:
        try:
            self.workers[w][1].send(command)
        except OSError:  # BrokenPipeError, ConnectionResetError: it ended
            self._lost(w)

    def _receive(self, w: int):
        try:
            return self.workers[w][1].recv()
        except (EOFError, OSError):
            self._lost(w)

    def _lost(self, w: int):
        import subprocess

        worker = self.workers[w][0]
        try:
            code = worker.wait(10)
        except subprocess.TimeoutExpired:  # its end of the connection closed, the process still there: ended now
            worker.kill()
            code = worker.wait()
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        users = range(w, self.users, self.processes)
        named = ", ".join(map(str, users[:3])) + (f", ... ({len(users)} users)" if len(users) > 3 else "")
        raise DevicesLost(f"the worker process of users {named} (pid {worker.pid}) ended ({how}) before it "
                          "answered: the demo cannot go on without its users") from None

    def _answers(self, workers) -> list:
        """Each of ``workers``'s answer to its last command (raising the first error, once all answered; DevicesLost
        for a worker that ended)."""
        answers = [self._receive(w) for w in workers]
        for ok, value in answers:
            if not ok:
                raise value
        for w, (_, (_, cpu)) in zip(workers, answers):
            self.worker_cpu[w] = cpu
        return [value[0] for _, value in answers]

    def call(self, method: str, calls) -> list:
        """``clients[i].method(*args)`` for each (i, args) of ``calls`` (in parallel), their results in that
        order."""
        calls = [(int(i), tuple(args)) for i, args in calls]
        if self.shard is not None:
            return self.shard.call(method, calls)[0]
        count = len(self.workers)
        busy = [w for w in range(count) if any(i % count == w for i, _ in calls)]
        for w in busy:
            self._send(w, (method, [c for c in calls if c[0] % count == w]))
        by_worker = {w: iter(r) for w, r in zip(busy, self._answers(busy))}
        return [next(by_worker[i % count]) for i, _ in calls]

    def cpu(self) -> float:
        """The users' CPU seconds since they were made: the demo's process's and each worker's, as of its last
        answer."""
        return _cpu() - self.start + sum(self.worker_cpu.values())

    def close(self) -> tuple[list, list[float]]:
        """The clients, user i's at i, and each user's CPU seconds in his calls; the workers end."""
        if self.shard is not None:
            self.shard.pool.shutdown()
            return [self.shard.clients[i] for i in range(self.users)], [self.shard.cpu[i] for i in range(self.users)]
        clients, cpu = {}, {}
        for w in range(len(self.workers)):
            self._send(w, None)
        for w, (worker, _) in enumerate(self.workers):
            ok, value = self._receive(w)
            if not ok:
                raise value
            clients.update(value[0])
            cpu.update(value[1])
            worker.wait()
        return [clients[i] for i in range(self.users)], [cpu[i] for i in range(self.users)]

    def __enter__(self) -> Devices:
        return self

    def __exit__(self, *exc) -> None:
        for worker, connection in self.workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
            connection.close()


def close_round(url: str, timeout: float) -> None:
    """POST to a round's close route (``url``), as the demo's operator: an empty body, waiting up to ``timeout``
    seconds (a close that releases inline takes long at large n); SubmitError if the server refused or did not
    answer."""
    import urllib.error
    import urllib.request

    from .calls import SubmitError

    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=timeout):
            pass
    except urllib.error.HTTPError as err:
        raise SubmitError(err.code, err.read().decode(errors="replace")[:300]) from None
    except (urllib.error.URLError, OSError) as err:
        raise SubmitError(None, str(err)) from None


def check_not_failed(url: str, task_id: str) -> None:
    """Nothing while the round server at ``url`` has not failed the task (or does not answer: the caller's error
    stands); else :class:`RoundFailed` with its reason (a demo whose task failed says why in one line, as the CLI
    prints it)."""
    import json
    import urllib.error
    import urllib.request

    from ..protocols.roles import RoundFailed

    try:
        with urllib.request.urlopen(f"{url}/tasks/{task_id}", timeout=60) as answer:
            state = json.loads(answer.read())
    except (urllib.error.URLError, OSError):
        return
    if state.get("state") != "failed":
        return
    if isinstance(state.get("failed"), str):  # TSS's S1 says why in its state (it serves no result)
        raise RoundFailed(f"the task failed: {state['failed']}")
    try:  # the reason is the result's: 409 {"error": "failed", "detail": why}
        with urllib.request.urlopen(f"{url}/tasks/{task_id}/result", timeout=60) as answer:
            why = json.loads(answer.read()).get("detail")
    except urllib.error.HTTPError as err:
        try:
            why = json.loads(err.read()).get("detail")
        except (ValueError, AttributeError):
            why = None
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        why = None
    raise RoundFailed(f"the task failed: {why}" if why else "the task failed, nothing was released (the server "
                      "gave no reason)")


def check_drop_fraction(drop_fraction: float) -> float:
    if isinstance(drop_fraction, bool) or not isinstance(drop_fraction, (int, float)) or not 0 <= drop_fraction < 0.5:
        raise ParameterError("drop-fraction", "in [0, 0.5)", drop_fraction)
    return float(drop_fraction)


def dropout_plan(users: int, drop_fraction: float, rounds: tuple[int, ...], seed: int) -> np.ndarray:
    """Each user's round of dropping out (0: none): floor(``drop_fraction`` n) users drawn at random, spread over
    ``rounds`` as evenly as they divide: the D a neighbour graph is planned for (:func:`privagg.privacy.
    neighbour_graph.dropouts_of`), not a binomial count that exceeds it half the time (and a failure bound stated at D
    with it)."""
    rng = np.random.default_rng(seed)
    plan = np.zeros(users, dtype=np.int64)
    out = rng.choice(users, size=dropouts_of(users, drop_fraction), replace=False)
    plan[out] = np.resize(np.asarray(rounds, dtype=np.int64), out.size)
    return plan


def min_survivors_for(users: int, drop_fraction: float) -> int:
    """The task's minimum: the survivors expected, less 4 standard deviations of the dropouts (at least 2)."""
    sd = math.sqrt(users * drop_fraction * (1 - drop_fraction))
    return max(2, math.floor(users * (1 - drop_fraction) - 4 * sd))


def traffic(clients, direction: str, kinds=None) -> dict[str, int]:
    """The entries of each kind of message (of ``kinds``, default all) ``clients`` sent or received
    (``direction``), in all."""
    return _summed(({kind: entries for (way, kind), (_, entries) in client.traffic.items() if way == direction}
                    for client in clients), kinds)


def _summed(counts, kinds=None) -> dict:
    """Per kind (of ``kinds``, default all), the sum of ``counts`` (dicts of kind to entries)."""
    totals: dict = {}
    for count in counts:
        for kind, entries in count.items():
            if kinds is None or kind in kinds:
                totals[kind] = totals.get(kind, 0) + entries
    return totals


def party_row(party: str, parties: int, sent: dict, received: dict, expected_sent: dict, expected_received: dict,
              table_i: str) -> dict:
    """One kind of party in the demo's traffic table: per party, the entries (field elements, items, seeds) of
    each kind of message it sent and received, measured and expected, and Table I's row (paper reference §4)."""
    per = max(parties, 1)
    return {"party": party, "parties": parties, "table_i": table_i,
            **{name: {k: v / per for k, v in sorted(d.items())} for name, d in (
                ("sent", sent), ("received", received), ("expected_sent", expected_sent),
                ("expected_received", expected_received))}}


class Deviation(NamedTuple):
    """One ``privagg demo-service --dishonest`` kind: one user deviating (service/sharing/dishonest.py,
    service/two_servers/dishonest.py)."""

    client: type  # the liar's SDK client
    did: str  # what he does
    outcome: str  # what the protocol does about it (docs/privacy.md, "Dishonest parties")


def deviation(kinds: dict[str, Deviation], protocol: str, kind: str) -> Deviation:
    """``kind`` of ``kinds`` (the protocol's service's), or ParameterError naming the accepted kinds."""
    if kind not in kinds:
        raise ParameterError("dishonest", f"one of {', '.join(kinds)} for {protocol}", kind)
    return kinds[kind]
