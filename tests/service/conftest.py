"""Databases for the service tests: each test that takes `databases` runs once on SQLite and once on PostgreSQL.

The service must work on both, so its suite runs on both. PostgreSQL is a throwaway server that the tests
start themselves (once per session, tests/pg_server.py), with fresh databases for each test; where
PostgreSQL is not installed, the PostgreSQL half is skipped with a message saying so, and the SQLite half
still runs.

The PostgreSQL half is marked slow (make test-all runs it), but for POSTGRESQL_IN_DEFAULT_RUN: the SQLite half
checks each test's property in the default run, and the tests of what only PostgreSQL does (collector replicas,
row locks under concurrent processes) ask for PostgreSQL alone and stay in it.
"""

import itertools
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pg_server import NOT_INSTALLED, admin, create_database, postgres_bin_dir, throwaway_postgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL server for the session; yields its URL, `postgresql+psycopg://postgres@127.0.0.1:PORT`."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        pytest.skip(NOT_INSTALLED)
    with throwaway_postgres(bin_dir) as url:
        yield url


@pytest.fixture
def postgres_databases(postgres_server: str) -> Iterator[Callable[[], str]]:
    """Makes fresh, empty databases on the session's server (their URLs); dropped afterwards, closing what is open."""
    made: list[str] = []

    def make() -> str:
        made.append(f"t_{secrets.token_hex(8)}")
        return create_database(postgres_server, made[-1])

    yield make
    for name in made:
        admin(postgres_server, f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], str]:
    """Makes URLs of new, empty databases, once per backend: SQLite files, or PostgreSQL databases (requested only
    then)."""
    if request.param == "sqlite":
        numbers = itertools.count()
        return lambda: f"sqlite:///{tmp_path}/{next(numbers)}.db"
    return request.getfixturevalue("postgres_databases")


@pytest.fixture
def kek(monkeypatch):
    """A new key-encryption key, also in ``PRIVAGG_KEK`` for the commands that read it there."""
    from privagg.service.keys import KeyEncryptionKey

    key = KeyEncryptionKey.generate()
    monkeypatch.setenv("PRIVAGG_KEK", key.export())
    return key


@pytest.fixture(params=["sqlite", "postgresql"])
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """A fresh database for each party ({"collector": URL, "analyzer": URL}), once per backend. PostgreSQL is
    requested lazily, so SQLite runs never start it."""
    if request.param == "sqlite":
        return {role: f"sqlite:///{tmp_path}/{role}.db" for role in ("collector", "analyzer")}
    make = request.getfixturevalue("postgres_databases")
    return {role: make() for role in ("collector", "analyzer")}


# the PostgreSQL halves the default run keeps: a whole task through the shuffle services, a task closed early,
# and a restart; the sharing server's rounds; S1 and S2's
POSTGRESQL_IN_DEFAULT_RUN = {"test_the_service_aggregates_exactly_what_the_clients_sent",
                             "test_an_early_close_is_debiased_with_the_reports_counted",
                             "test_the_aggregate_persists_across_restarts",
                             "test_the_rounds_release_the_survivors_sum_exactly",
                             "test_the_servers_release_the_sampled_counts_exactly"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        params = getattr(item, "callspec", None)
        on_postgresql = params is not None and "postgresql" in [v for v in params.params.values() if isinstance(v, str)]
        if on_postgresql and item.originalname not in POSTGRESQL_IN_DEFAULT_RUN:
            item.add_marker(pytest.mark.slow)
