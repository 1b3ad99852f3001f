"""The services' durable state: SQLAlchemy 2 tables, the database connection, and Alembic migrations.

Each party has its own database and its own tables; neither reads the other's.

Collector (the shuffler): the tasks it serves (public, and whether closed), the one-use tokens it issued (only their SHA-256,
and the report id a token was spent on, which doubles as the report-id de-duplication record), the
reports it holds (the sealed messages of each, as one blob of fixed-size ciphertexts) until the analyzer
acknowledges their batch, and the batches it formed. Nothing here can open a message.

Analyzer: its tasks with their HPKE private keys, the running aggregate of each task with its counters, and
the ids of the batches it has applied (a replayed batch is applied once).

SQLite (the default, a file beside the service) runs in WAL mode with ``synchronous=FULL``: a committed
report survives a kill -9 of the process and a power cut. PostgreSQL (``postgresql+psycopg://...``) is
for scale. The schema is versioned with Alembic (``migrations/``, one version table per party), and each
service upgrades its database to the latest version when it starts.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from ..errors import ParameterError

ROLES = ("collector", "analyzer")

metadata = {role: sa.MetaData() for role in ROLES}

# ---- the collector ----------------------------------------------------------------------------------------
collector_tasks = sa.Table(
    "collector_tasks", metadata["collector"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("task", sa.Text, nullable=False),  # the task's public JSON, as the analyzer serves it
    sa.Column("closed", sa.Boolean, nullable=False, server_default=sa.false()),  # no report is taken after
)
tokens = sa.Table(
    "tokens", metadata["collector"],
    sa.Column("token_hash", sa.LargeBinary(32), primary_key=True),  # SHA-256 of the token: the token is not kept
    sa.Column("task_id", sa.String(32), nullable=False),
    sa.Column("report_id", sa.String(32)),  # the report the token was spent on; NULL while unused
    sa.UniqueConstraint("task_id", "report_id", name="one_report_per_id"),
)
reports = sa.Table(
    "reports", metadata["collector"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("report_id", sa.String(32), primary_key=True),
    sa.Column("ciphertexts", sa.LargeBinary, nullable=False),  # the sealed messages, each of the task's size
    sa.Column("batch_id", sa.String(32), index=True),  # NULL until a batch takes it
)
batches = sa.Table(
    "batches", metadata["collector"],
    sa.Column("batch_id", sa.String(32), primary_key=True),
    sa.Column("task_id", sa.String(32), nullable=False, index=True),
    sa.Column("reports", sa.Integer, nullable=False),
    sa.Column("messages", sa.Integer, nullable=False),
    sa.Column("acknowledged", sa.Boolean, nullable=False),
)

# ---- the analyzer -----------------------------------------------------------------------------------------
analyzer_tasks = sa.Table(
    "analyzer_tasks", metadata["analyzer"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("task", sa.Text, nullable=False),
    sa.Column("private_key", sa.LargeBinary, nullable=False),  # raw (tasks.py): protect this database as the key
)
aggregates = sa.Table(
    "aggregates", metadata["analyzer"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("aggregate", sa.LargeBinary, nullable=False),  # the analyzer's aggregate, pickled (our own data)
    sa.Column("batches", sa.Integer, nullable=False),
    sa.Column("reports", sa.Integer, nullable=False),
    sa.Column("unopened", sa.Integer, nullable=False),  # messages that would not open (wrong key, tampered)
)
applied_batches = sa.Table(
    "applied_batches", metadata["analyzer"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("batch_id", sa.String(32), primary_key=True),
)


def default_url(role: str) -> str:
    """The embedded default: a SQLite file in the working folder."""
    return f"sqlite:///privagg-{role}.db"


def connect(url: str, role: str) -> sa.Engine:
    """An engine for ``role``'s database at ``url`` (SQLite or PostgreSQL), its schema brought to the latest
    version (:func:`migrate`); SQLite in WAL mode with fully synchronous commits."""
    engine = _engine(url)
    migrate(engine, role)
    return engine


def _engine(url: str) -> sa.Engine:
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        raise ParameterError("db", "a database URL (sqlite:///FILE or postgresql+psycopg://USER@HOST/DB)", url) from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ParameterError("db", "a SQLite or PostgreSQL URL", url)
    if parsed.get_backend_name() == "postgresql":
        return sa.create_engine(parsed, pool_size=10, max_overflow=20, pool_pre_ping=True)
    engine = sa.create_engine(parsed, connect_args={"timeout": 30, "check_same_thread": False})

    @sa.event.listens_for(engine, "connect")
    def _pragmas(connection, _record) -> None:
        connection.isolation_level = None  # the transactions below are ours, not the driver's
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(connection) -> None:
        # take the write lock up front: a read that later writes would otherwise fail at once, not wait, when
        # another writer committed in between (SQLITE_BUSY_SNAPSHOT)
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def migrate(engine: sa.Engine, role: str) -> None:
    """Bring the ``role``'s tables to the latest schema version (Alembic ``upgrade head``)."""
    from alembic import command
    from alembic.config import Config

    if role not in ROLES:
        raise ParameterError("role", f"one of {', '.join(ROLES)}", role)
    folder = Path(__file__).parent / "migrations"
    config = Config()
    config.set_main_option("path_separator", "os")
    config.set_main_option("script_location", str(folder))
    config.set_main_option("version_locations", str(folder / "versions" / role))
    config.attributes["role"] = role
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
