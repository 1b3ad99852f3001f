"""Databases for the service tests: each test that takes `databases` runs once on SQLite and once on PostgreSQL.

The service must work on both, so its suite runs on both. PostgreSQL is a throwaway server that the tests
start themselves (once per session, on a free port of 127.0.0.1, in a temporary folder removed afterwards),
with a fresh database for each test; where PostgreSQL is not installed, the PostgreSQL half is skipped with
a message saying so, and the SQLite half still runs.
"""

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url


def _postgres_bin_dir() -> Path | None:
    """The folder holding both `initdb` and `pg_ctl`: the one `initdb` on PATH links to, else the newest install."""
    candidates = []
    if on_path := shutil.which("initdb"):
        candidates.append(Path(on_path).resolve().parent)
    installed = Path("/usr/lib/postgresql").glob("*/bin")
    candidates += sorted(installed, key=lambda d: [int(n) for n in d.parent.name.split(".") if n.isdigit()])[::-1]
    return next((d for d in candidates if (d / "initdb").is_file() and (d / "pg_ctl").is_file()), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL server for the session; yields its URL, `postgresql+psycopg://postgres@127.0.0.1:PORT`."""
    bin_dir = _postgres_bin_dir()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL is not installed (no initdb/pg_ctl on PATH or in /usr/lib/postgresql/*/bin): "
            "the PostgreSQL half of the service tests is skipped"
        )
    root = Path(tempfile.mkdtemp(prefix="privagg-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root: run the server as `postgres`, in a folder it owns
        shutil.chown(root, user="postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, log, port = root / "data", root / "server.log", _free_port()

    def run(*args: str) -> None:
        subprocess.run([*as_user, *args], cwd=root, check=True)  # its output shows in pytest's report on failure

    # fsync stays on: the durability tests kill -9 our own processes, not PostgreSQL, so fsync=off would be
    # harmless, but it did not make the per-test CREATE DATABASE measurably faster here (about 70-90 ms either way).
    options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} -c max_connections=200"
    try:
        run(str(bin_dir / "initdb"), "-A", "trust", "-U", "postgres", "--no-sync", "-D", str(data))
        try:
            run(str(bin_dir / "pg_ctl"), "-w", "-D", str(data), "-o", options, "-l", str(log), "start")
        except subprocess.CalledProcessError:
            pytest.fail(f"PostgreSQL did not start; its log:\n{log.read_text() if log.exists() else '(none)'}")
        try:
            yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
        finally:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_databases(postgres_server: str) -> Iterator[Callable[[], str]]:
    """Makes fresh, empty databases on the session's server (their URLs); dropped afterwards, closing what is open."""
    made: list[str] = []

    def make() -> str:
        made.append(f"t_{secrets.token_hex(8)}")
        _admin(postgres_server, f"CREATE DATABASE {made[-1]}")
        return f"{postgres_server}/{made[-1]}"

    yield make
    for name in made:
        _admin(postgres_server, f"DROP DATABASE {name} WITH (FORCE)")


def _admin(server: str, statement: str) -> None:
    """Run a statement that cannot run in a transaction (CREATE/DROP DATABASE) in the server's `postgres` database."""
    url = make_url(server)
    with psycopg.connect(host=url.host, port=url.port, user=url.username, dbname="postgres", autocommit=True) as conn:
        conn.execute(statement)


@pytest.fixture(params=["sqlite", "postgresql"])
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """A fresh database for each party ({"collector": URL, "analyzer": URL}), once per backend. PostgreSQL is
    requested lazily, so SQLite runs never start it."""
    if request.param == "sqlite":
        return {role: f"sqlite:///{tmp_path}/{role}.db" for role in ("collector", "analyzer")}
    make = request.getfixturevalue("postgres_databases")
    return {role: make() for role in ("collector", "analyzer")}
