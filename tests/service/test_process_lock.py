"""One process serves a party's database (service/process_lock.py): while a service runs, a second one of that party
over the same database is refused, and so are ``privagg db upgrade`` and ``db downgrade``, each in one line naming the
database and the lock, the database unchanged; once the service is killed (SIGKILL: no shutdown code runs) the lock
is gone. SQLite's lock is a file's flock, PostgreSQL's an advisory lock (that half marked slow, conftest.py); the
collector's replicas on PostgreSQL share theirs (tests/service/test_replicas.py)."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from privagg.cli import app
from privagg.errors import ParameterError
from privagg.service import storage
from privagg.service.schema_versions import chain

HOLD = ("import sys; from privagg.service import storage; from privagg.service.keys import KeyEncryptionKey; "
        "role = sys.argv[2]; kek = {'kek': KeyEncryptionKey.load()} if role in ('analyzer', 's2') else {}; "
        "storage.serving(sys.argv[1], role, **kek); print('serving', flush=True); sys.stdin.read()")




def serve(url: str, role: str) -> subprocess.Popen:
    """Another process serving ``role`` over ``url`` (what ``privagg serve`` opens its database with), once it
    holds the lock."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, url, role], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline() == "serving\n"
    return holder


def tables(url: str) -> dict:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            return {t: sorted(map(tuple, c.execute(sa.text(f'SELECT * FROM "{t}"')))) for t in
                    sorted(sa.inspect(c).get_table_names())}
    finally:
        engine.dispose()


@pytest.mark.parametrize("role", ["sharing", "s1", "s2", "analyzer"])
def test_a_second_service_and_the_schema_commands_are_refused_while_one_serves(fresh, kek, role):
    url = fresh()
    storage.upgrade_database(url, role, kek=kek, create=True)
    before = tables(url)
    holder = serve(url, role)
    try:
        with pytest.raises(ParameterError) as second:
            storage.serving(url, role, kek=kek)
        assert second.value.field == "db"
        assert str(second.value).startswith(f"db must be a database no other {role} process serves (the {role} runs "
                                            f"as one process), got {url}, served by another process (it holds ")
        oldest = chain(role)[-1] if role != "analyzer" else "a0003"  # what a downgrade may reach
        for command in (["upgrade"], ["downgrade", "--to", "s2_0002" if role == "s2" else oldest]):
            result = CliRunner().invoke(app, ["db", *command, "--role", role, "--db", url])
            assert result.exit_code == 2 and result.output.startswith(
                f"error: db must be a database no {role} process serves (stop every {role} process first: a schema "
                f"changed under one would meet code that does not know it), got {url}, served by another process "
                "(it holds ") and result.output.count("\n") == 1, result.output
        assert tables(url) == before
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    deadline = time.monotonic() + 10  # PostgreSQL ends the killed process's session once it sees its socket closed
    while True:
        try:
            storage.serving(url, role, kek=kek).dispose()  # this process now serves it (till it ends)
            break
        except ParameterError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert storage.upgrade_database(url, role, kek=kek)[1] == chain(role)[0]  # the process that serves it may
    if url.startswith("postgresql"):  # the server probes the lock's session, so a vanished host lets it go
        from privagg.service import process_lock

        held = process_lock._HELD[url, role]  # by its URL on PostgreSQL
        assert {name: int(held.execute(sa.text(f"SHOW {name}")).scalar_one().rstrip("s")) for name in
                process_lock.KEEPALIVES} == process_lock.KEEPALIVES
        pid = held.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        engine = sa.create_engine(url)
        with engine.connect() as c:  # its open transaction holds no snapshot (keeps no vacuum waiting), no xid
            state = c.execute(sa.text("SELECT state, backend_xmin, backend_xid FROM pg_stat_activity WHERE pid = :p"),
                              {"p": pid}).one()
        engine.dispose()
        assert tuple(state) == ("idle in transaction", None, None)


def test_the_command_line_service_holds_the_lock_until_it_is_killed(tmp_path):
    """``privagg serve sharing`` itself: a second one over the same SQLite file exits 2 in one line; once the first
    is killed with SIGKILL a new one starts."""
    from privagg.service.local import free_port

    url = f"sqlite:///{tmp_path}/sharing.db"
    storage.upgrade_database(url, "sharing", create=True)

    def start() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "privagg", "serve", "sharing", "--db", url, "--port",
                                 str(free_port())], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def serving(server: subprocess.Popen) -> None:
        """Once ``server`` holds the lock (db upgrade is then refused)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                storage.upgrade_database(url, "sharing")
            except ParameterError:
                return
            assert server.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)

    first = start()
    try:
        lock = tmp_path / "sharing.db.sharing.lock"
        serving(first)
        second = start()
        _, err = second.communicate(timeout=60)
        assert second.returncode == 2 and err.splitlines()[-1] == (
            f"error: db must be a database no other sharing process serves (the sharing runs as one process), got "
            f"{url}, served by another process (it holds {lock})"), err
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    third = start()
    try:
        serving(third)
    finally:
        third.terminate()
        third.wait(30)


def test_the_collectors_replicas_on_postgresql_share_a_lock_the_schema_commands_respect(postgres_databases):
    """Its replicas share one PostgreSQL database: a second collector process over it is not refused, and db upgrade is
    while either runs."""
    url = postgres_databases()
    storage.upgrade_database(url, "collector", create=True)
    holder = serve(url, "collector")
    try:
        result = CliRunner().invoke(app, ["db", "upgrade", "--role", "collector", "--db", url])
        assert result.exit_code == 2 and result.output.startswith("error: db must be a database no collector "
                                                                  "process serves (stop every collector process first")
        storage.serving(url, "collector").dispose()  # a replica beside it (this process)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def test_a_lock_file_the_operator_may_not_read_is_named(tmp_path, monkeypatch):
    """The lock file is the service user's (mode 0600); an operator who may write the database but not read it is
    told so, not shown a traceback (modes are simulated: the tests run as root, whom they do not stop)."""
    from privagg.service import process_lock

    url = f"sqlite:///{tmp_path}/sharing.db"
    storage.upgrade_database(url, "sharing", create=True)
    lock = tmp_path / "sharing.db.sharing.lock"
    lock.touch(mode=0o600)
    real = process_lock.os.open

    def denied(path, flags, *args):
        if Path(path) == lock:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, flags, *args)

    monkeypatch.setattr(process_lock.os, "open", denied)
    result = CliRunner().invoke(app, ["db", "upgrade", "--role", "sharing", "--db", url])
    assert result.exit_code == 2 and result.output == (
        f"error: db must be a database whose sharing lock file this user may read (to see that no sharing process "
        f"serves it), got {url}: {lock}: Permission denied\n"), result.output


def test_the_same_file_by_another_path_is_the_same_lock(tmp_path, monkeypatch):
    """A symbolic link to the database, or a relative path to it, names the same file: a second service reaching it
    that way is refused too."""
    url = f"sqlite:///{tmp_path}/sharing.db"
    storage.upgrade_database(url, "sharing", create=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "link.db").symlink_to(tmp_path / "sharing.db")
    holder = serve(url, "sharing")
    try:
        monkeypatch.chdir(tmp_path / "other")
        for other in (f"sqlite:///{tmp_path}/other/link.db", "sqlite:///../sharing.db"):
            with pytest.raises(ParameterError, match="served by another process"):
                storage.serving(other, "sharing")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    for other in (url, f"sqlite:///{tmp_path}/other/link.db"):  # this process serves it, by either name
        storage.serving(other, "sharing").dispose()
