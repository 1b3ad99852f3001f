"""A throwaway PostgreSQL server in a temporary folder: for the service tests (conftest.py) and benchmarks.

Started on a free port of 127.0.0.1, stopped and removed on exit. initdb refuses to run as root, so as
root the server runs as the `postgres` user, in a folder it owns.
"""

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from privagg.service.local import free_port

NOT_INSTALLED = ("PostgreSQL is not installed (no initdb/pg_ctl on PATH or in /usr/lib/postgresql/*/bin): "
                 "the PostgreSQL half of the service tests is skipped")


def postgres_bin_dir() -> Path | None:
    """The folder holding both `initdb` and `pg_ctl`: the one `initdb` on PATH links to, else the newest install."""
    candidates = []
    if on_path := shutil.which("initdb"):
        candidates.append(Path(on_path).resolve().parent)
    installed = Path("/usr/lib/postgresql").glob("*/bin")
    candidates += sorted(installed, key=lambda d: [int(n) for n in d.parent.name.split(".") if n.isdigit()])[::-1]
    return next((d for d in candidates if (d / "initdb").is_file() and (d / "pg_ctl").is_file()), None)


@contextmanager
def throwaway_postgres(bin_dir: Path) -> Iterator[str]:
    """A PostgreSQL server for as long as the block runs; yields `postgresql+psycopg://postgres@127.0.0.1:PORT`."""
    root = Path(tempfile.mkdtemp(prefix="privagg-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, user="postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, log, port = root / "data", root / "server.log", free_port()

    def run(*args: str) -> None:
        subprocess.run([*as_user, *args], cwd=root, check=True, stdout=subprocess.DEVNULL)

    # fsync stays on: the durability tests kill -9 our own processes, not PostgreSQL, so fsync=off would be
    # harmless, but it did not make the per-test CREATE DATABASE measurably faster here (about 70-90 ms either way).
    options = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} "
               "-c max_connections=200")
    try:
        run(str(bin_dir / "initdb"), "-A", "trust", "-U", "postgres", "--no-sync", "-D", str(data))
        try:
            run(str(bin_dir / "pg_ctl"), "-w", "-D", str(data), "-o", options, "-l", str(log), "start")
        except subprocess.CalledProcessError:
            raise RuntimeError(f"PostgreSQL did not start; its log:\n{log.read_text() if log.exists() else '(none)'}")
        try:
            yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
        finally:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def create_database(server: str, name: str) -> str:
    """A new empty database on ``server``; its URL."""
    admin(server, f"CREATE DATABASE {name}")
    return f"{server}/{name}"


def admin(server: str, statement: str) -> None:
    """Run a statement that cannot run in a transaction (CREATE/DROP DATABASE) in the server's `postgres` database."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(server)
    with psycopg.connect(host=url.host, port=url.port, user=url.username, dbname="postgres", autocommit=True) as conn:
        conn.execute(statement)
