"""The analyzer's decryption workers (privagg.service.shuffle.workers): they open a batch as one process does, exist
only while a batch is opened, and die with the analyzer, even under kill -9 in the middle of a batch, leaving
no process (worker, multiprocessing's resource tracker) and no copy of the private key behind.

Linux only: the processes are found in /proc, and a process's memory is read through /proc/PID/mem.
"""

import os
import secrets
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest

from privagg.protocols.registry import calibrate, client as make_client
from privagg.service.tasks import create_task, open_messages, seal_messages

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds processes in /proc (Linux)")

MARK = "PRIVAGG_TEST_PROCESS_MARK"  # set in a started process's environment, so its descendants can be found


# ---- processes, as /proc shows them --------------------------------------------------------------------------
def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # the process is gone, or not ours to read
        return None


def processes() -> dict[int, tuple[int, str]]:
    """Every live process: pid -> (its parent's pid, its command line)."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat, cmdline = _read(f"/proc/{name}/stat"), _read(f"/proc/{name}/cmdline")
        if stat is None or cmdline is None:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
        if fields[0] == b"Z":  # a zombie has exited; only its parent's wait is missing
            continue
        table[int(name)] = (int(fields[1]), cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return table


def descendants(root: int, table: dict[int, tuple[int, str]] | None = None) -> dict[int, str]:
    """The live processes below ``root``: pid -> command line."""
    table = processes() if table is None else table
    found, frontier = {}, {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in table.items() if ppid in frontier and pid not in found}
        found.update({pid: table[pid][1] for pid in frontier})
    return found


def marked(mark: str) -> dict[int, str]:
    """The live processes whose environment holds ``MARK=mark``: whatever a marked process started, even once
    orphaned (the environment is inherited)."""
    needle = f"{MARK}={mark}".encode()
    return {pid: cmdline for pid, (_, cmdline) in processes().items()
            if needle in (_read(f"/proc/{pid}/environ") or b"").split(b"\0")}


def memory_holds(pid: int, needle: bytes) -> bool:
    """Whether ``needle`` is anywhere in the process's writable memory (heap, anonymous maps, stacks)."""
    maps = _read(f"/proc/{pid}/maps")
    if maps is None:
        return False
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps.decode().splitlines():
            span, perms = line.split()[:2]
            if not perms.startswith("rw"):
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            tail = b""
            for at in range(start, end, 1 << 24):
                try:
                    mem.seek(at)
                    block = tail + mem.read(min(1 << 24, end - at))
                except OSError:  # [vvar] and the like
                    break
                if needle in block:
                    return True
                tail = block[-(len(needle) - 1):]
    return False


def wait_until(condition, seconds: float, step: float = 0.01):
    """Poll ``condition`` until it is true (returns its value) or ``seconds`` pass (returns the last value)."""
    deadline = time.monotonic() + seconds
    while not (value := condition()) and time.monotonic() < deadline:
        time.sleep(step)
    return value


def workers_of(pid: int) -> dict[int, str]:
    return {p: c for p, c in descendants(pid).items() if "spawn_main" in c}


def sealed_rows(task, messages) -> np.ndarray:
    return np.frombuffer(b"".join(seal_messages(task, messages)), dtype=np.uint8).reshape(len(messages), -1)


# ---- the pool itself -----------------------------------------------------------------------------------------
def test_a_batch_pool_opens_as_one_process_does_and_leaves_no_worker():
    from privagg.service.shuffle.workers import BatchWorkers

    n = 900
    params = calibrate("grr", epsilon=1.0, n_users=n, domain_size=5)
    task, key = create_task(params)
    sealed = sealed_rows(task, make_client(params).randomize(np.arange(n) % 5, np.random.default_rng(7)))
    sealed = sealed.copy()
    sealed[::50, -1] ^= 1  # 18 tampered messages: they do not open, wherever they fall
    before = set(descendants(os.getpid()))

    seen: set[int] = set()
    stop = threading.Event()

    def watch() -> None:  # the workers, while the batch is opened
        while not stop.is_set():
            seen.update(workers_of(os.getpid()))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        opened = BatchWorkers(2, min_messages=0).open(task, key, sealed)
    finally:
        stop.set()
        watcher.join()
    expected = open_messages(task, key, sealed)

    assert len(opened) == 8  # 4 chunks a worker
    assert sum(o.unopened for o in opened) == expected.unopened == 18
    for name in params.layout.names:  # the same messages in the same order
        assert np.array_equal(np.concatenate([np.asarray(o.messages[name]) for o in opened]),
                              np.asarray(expected.messages[name]))
    assert len(seen) == 2  # it did run on two processes ...
    after = descendants(os.getpid())
    assert not set(after) & seen  # ... which are gone once the batch is opened
    # what stays is at most multiprocessing's resource tracker: one a process, started by the first pool, holding
    # no key (it only hears the names of semaphores) and gone when this process is (see the kill -9 test)
    left = {pid: cmdline for pid, cmdline in after.items() if pid not in before}
    assert all("resource_tracker" in cmdline for cmdline in left.values()), left
    assert not any(memory_holds(pid, key) for pid in after if "resource_tracker" in after[pid])


def test_a_small_batch_is_opened_in_this_process():
    from privagg.service.shuffle.workers import BatchWorkers

    params = calibrate("grr", epsilon=1.0, n_users=50, domain_size=5)
    task, key = create_task(params)
    sealed = sealed_rows(task, make_client(params).randomize(np.arange(50) % 5, np.random.default_rng(1)))
    before = set(descendants(os.getpid()))
    opened = BatchWorkers(2, min_messages=51).open(task, key, sealed)
    assert len(opened) == 1 and len(opened[0].messages) == 50 and set(descendants(os.getpid())) <= before


def test_a_stopped_pool_opens_no_batch():
    from privagg.service.shuffle.workers import BatchWorkers

    params = calibrate("grr", epsilon=1.0, n_users=50, domain_size=5)
    task, key = create_task(params)
    sealed = sealed_rows(task, make_client(params).randomize(np.arange(50) % 5, np.random.default_rng(1)))
    workers = BatchWorkers(2, min_messages=0)
    workers.shutdown()  # the analyzer stops
    with pytest.raises(RuntimeError, match="stopping"):
        workers.open(task, key, sealed)


def test_a_worker_whose_parent_died_before_it_armed_exits():
    """The race: the parent may die between the spawn and the prctl; the worker then has a new parent, and the
    initializer's check of getppid() against the expected parent ends it."""
    code = "import sys; from privagg.service.shuffle.workers import arm; arm(int(sys.argv[1])); print('armed')"
    from privagg.service.shuffle.workers import EXIT_ORPHANED

    wrong = subprocess.run([sys.executable, "-c", code, str(2**22 + 1)], capture_output=True, text=True,
                           timeout=60)  # no process has that pid: pid_max is at most 2^22
    assert wrong.returncode == EXIT_ORPHANED and "armed" not in wrong.stdout, wrong.stderr
    right = subprocess.run([sys.executable, "-c", code, str(os.getpid())], capture_output=True, text=True,
                           timeout=60)
    assert right.returncode == 0 and right.stdout == "armed\n", right.stderr


OWNER = """
import os, sys, time
from privagg.service.shuffle.workers import batch_pool
death_signal, watchdog = sys.argv[1] == "1", float(sys.argv[2])
with batch_pool(2, death_signal=death_signal, watchdog=watchdog) as pool:
    armed = set()  # a worker answers only once its initializer has run
    while len(armed) < 2:
        armed.update(f.result() for f in [pool.submit(os.getpid) for _ in range(8)])
    print(*sorted(armed), flush=True)
    list(pool.map(time.sleep, [120, 120]))
"""


@pytest.mark.parametrize("death_signal, watchdog", [(True, 3600.0), (False, 0.25)],
                         ids=["parent-death signal alone", "watchdog alone"])
def test_each_guard_alone_ends_the_workers_of_a_killed_parent(death_signal, watchdog, tmp_path):
    """A process holding a pool whose workers sleep for two minutes is killed with SIGKILL once they are armed:
    the workers die at once with the parent-death signal alone (their watchdog looks once an hour), and within
    the watchdog's interval without the signal (as where prctl is not available); multiprocessing's resource
    tracker follows them."""
    import select

    mark = secrets.token_hex(8)
    with open(tmp_path / "owner.err", "wb") as err:
        owner = subprocess.Popen([sys.executable, "-c", OWNER, "1" if death_signal else "0", str(watchdog)],
                                 env={**os.environ, MARK: mark}, stdout=subprocess.PIPE, stderr=err)
    try:
        line = owner.stdout.readline() if select.select([owner.stdout], [], [], 60)[0] else b""
        workers = {int(pid) for pid in line.split()}
        assert len(workers) == 2 and workers == set(workers_of(owner.pid)), \
            (line, (tmp_path / "owner.err").read_text())
        below = descendants(owner.pid)
    finally:
        owner.kill()
        owner.wait()
    start = time.monotonic()
    workers_gone = wait_until(lambda: not workers & set(processes()), 10)
    workers_seconds = time.monotonic() - start
    all_gone = wait_until(lambda: not marked(mark), 10)
    seconds = time.monotonic() - start
    owner.stdout.close()
    print(f"{'signal' if death_signal else 'watchdog'}: workers {sorted(workers)} gone after {workers_seconds:.3f} s, "
          f"every process below the owner ({len(below)}) after {seconds:.3f} s")
    assert workers_gone and all_gone, marked(mark)  # workers and resource tracker
    assert workers_seconds < (1.0 if death_signal else 1.0 + watchdog)
    assert "Traceback" not in (tmp_path / "owner.err").read_text()


# ---- the attack: kill -9 of a real analyzer in the middle of a batch --------------------------------------------
def test_kill_9_of_the_analyzer_while_it_opens_a_batch_leaves_no_process_and_no_key(tmp_path):
    import sqlalchemy as sa

    from privagg.service import storage
    from privagg.service.shuffle.analyzer import AnalyzerService
    from privagg.service.shuffle.collector import batch_stream
    from privagg.service.keys import KeyEncryptionKey
    from privagg.service.local import free_port, wait_ready

    m = 60_000  # messages: about a second of opening on two workers
    db = f"sqlite:///{tmp_path}/analyzer.db"
    engine, kek = storage.connect(db, "analyzer"), KeyEncryptionKey.load()  # PRIVAGG_KEK, as the served analyzer
    task = AnalyzerService(engine, kek=kek).create_task(calibrate("grr", epsilon=1.0, n_users=m, domain_size=5))
    with engine.connect() as c:
        key = kek.open(c.execute(sa.select(storage.analyzer_tasks.c.sealed_key)).scalar_one(), task.task_id)
    engine.dispose()
    messages = make_client(task.parameters).randomize(np.arange(m) % 5, np.random.default_rng(5))
    batch_id = secrets.token_hex(16)
    blob = batch_stream(task.task_id, batch_id, m, sealed_rows(task, messages))  # m separate seals

    mark, token, port = secrets.token_hex(8), secrets.token_urlsafe(16), free_port()
    url = f"http://127.0.0.1:{port}"
    with open(tmp_path / "analyzer.log", "wb") as log:
        analyzer = subprocess.Popen([sys.executable, "-m", "privagg", "serve", "analyzer", "--db", db, "--port",
                                     str(port), "--workers", "2"], stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PRIVAGG_ANALYZER_COLLECTOR_TOKEN": token, MARK: mark})
    try:
        wait_ready(url)
        answers: list = []

        def post() -> None:
            request = urllib.request.Request(f"{url}/tasks/{task.task_id}/batches/{batch_id}", data=blob,
                                             headers={"Authorization": f"Bearer {token}",
                                                      "Content-Type": "application/vnd.apache.arrow.stream"})
            try:
                with urllib.request.urlopen(request, timeout=120) as answer:
                    answers.append(answer.status)
            except Exception as err:  # the analyzer is killed under it
                answers.append(err)

        poster = threading.Thread(target=post)
        poster.start()
        seen: dict[int, str] = {}  # every process below the analyzer, while it opened

        def decrypting() -> bool:  # both workers are up and hold the key: they are opening messages
            below = descendants(analyzer.pid)
            seen.update(below)
            workers = [pid for pid, cmdline in below.items() if "spawn_main" in cmdline]
            return len(workers) == 2 and all(memory_holds(pid, key) for pid in workers)

        assert wait_until(decrypting, 60), f"no worker held the key; the analyzer's processes: {seen}; " \
                                            f"answers: {answers}"
        seen.update(descendants(analyzer.pid))
    finally:
        analyzer.kill()  # SIGKILL: no shutdown code runs
        analyzer.wait()
    killed = time.monotonic()
    poster.join(120)
    assert answers and answers[0] != 200  # the batch was not acknowledged

    gone = wait_until(lambda: not marked(mark) and not set(seen) & set(processes()), 10)
    seconds = time.monotonic() - killed
    survivors = {**marked(mark), **{pid: c for pid, (_, c) in processes().items() if pid in seen}}
    holding = [pid for pid in survivors if memory_holds(pid, key)]
    workers = sorted(pid for pid, cmdline in seen.items() if "spawn_main" in cmdline)
    print(f"workers seen: {workers}; processes below the analyzer: {len(seen)}; all gone "
          f"{seconds:.3f} s after the kill")
    assert gone, f"left behind: {survivors}; holding the key: {holding}"
    assert len(workers) == 2 and not holding
