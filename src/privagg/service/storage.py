"""The services' durable state: SQLAlchemy 2 tables, the database connection, and Alembic migrations.

Each party has its own database and its own tables; neither reads the other's.

Collector (the shuffler): the tasks it serves (public, and whether closed), the one-use tokens it issued (only their SHA-256,
and the report id a token was spent on, which doubles as the report-id de-duplication record), the
reports it holds (the sealed messages of each, as one blob of fixed-size ciphertexts) until the analyzer
acknowledges their batch, the batches it formed, and the SHA-256 of every accepted message's HPKE
encapsulated key under its task's number (so a replayed message is refused; no report id, token or arrival order
beside it).
Nothing here can open a message.

Sharing server (DPDS and DPDG, :mod:`privagg.service.sharing.server`, the round driver's tables:
:mod:`privagg.service.rounds`): its tasks with their open round (number and name), its deadline and the lists
the coordinator published, the one-use enrollment tokens (hashed), the roster (each user's public key and the
hash of the secret he authenticates with), each user's message to the server in each round, and the sealed
messages it relays (one row per round, sender and recipient, which it cannot open); the release once computed.
The primary keys make every message stored once.

Analyzer: its tasks with their HPKE private keys (sealed under a key-encryption key kept outside the database:
:mod:`privagg.service.keys`), the running aggregate of each task with its counters (a versioned .npz archive
read without pickle: :mod:`privagg.service.shuffle.aggregate_codec`), the
ids of the batches it has applied (a replayed batch is applied once), and for a local task (several
batches) the encapsulation digests of the messages applied (a message repeated in a later batch is dropped).
A task with public candidates (a frequency task over a huge domain) also keeps the messages it opened, so that
candidates added later are answered: they are the shuffled multiset the release is computed from, no more.

The analyzer, the sharing server and S1 also keep the privacy budget across tasks: each population's budget and
each task's charge (tables ``budgets`` and ``budget_charges``, declared in :mod:`privagg.service.ledger`).

SQLite (the default, a file beside the service) runs in WAL mode with ``synchronous=FULL``: a committed
report survives a kill -9 of the process and a power cut. PostgreSQL (``postgresql+psycopg://...``) is
for scale. The schema is versioned with Alembic (``migrations/``, one version table per party): a database is
made at the latest version, and one of an older release is brought to it by ``privagg db upgrade`` (a service
refuses it rather than upgrade it under other processes); one of a newer release is refused by every command, and
taken back to this release's version by that release's ``privagg db downgrade`` (:mod:`.schema_versions`).

Each database knows its role: one row of ``privagg_database`` names it (analyzer, collector, sharing, s1, s2),
written by the role's own migration (a0007, c0006, s0002, s1_0002, s2_0003; a database of an older release has
only its Alembic version table, ``alembic_version_ROLE``, which names it too). :func:`connect` refuses another
role's database, naming both roles, and makes a new database only when asked (``create``): the commands that
make one are ``privagg task create`` and ``privagg db upgrade --create``, so a mistyped URL is refused, not
taken for a new, empty database.

At rest (:func:`connect`, :func:`scrub`): a SQLite database is created mode 0600 (its -wal and -shm files
take the same), an analyzer's database open to group or others is refused, and so is a collector's that
they may write. Deleted rows are overwritten (``secure_delete``), and after a released batch's reports are
deleted the WAL is checkpointed and truncated, so no released ciphertext stays in the database's files. On
PostgreSQL the reports table is vacuumed instead, which only marks the space reusable: encrypted storage and
a retention for WAL archives and backups are the operator's part.
"""

from __future__ import annotations

import functools
import logging
import math
import operator
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

from ..errors import ParameterError
from .process_lock import check_not_served, hold, sqlite_path
from .schema_versions import a_role, downgrade, migrate

ROLES = ("collector", "analyzer", "sharing", "s1", "s2")  # s1, s2: TSS's servers (service/two_servers/servers.py)

metadata = {role: sa.MetaData() for role in ROLES}

# in every role's database, the one row naming its role (record_role, in each role's migration; read by connect)
database_role = {role: sa.Table("privagg_database", metadata[role],
                                sa.Column("role", sa.String(16), primary_key=True)) for role in ROLES}

# ---- the collector ----------------------------------------------------------------------------------------
collector_tasks = sa.Table(
    "collector_tasks", metadata["collector"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("task", sa.Text, nullable=False),  # the task's public JSON, as the analyzer serves it
    sa.Column("closed", sa.Boolean, nullable=False, server_default=sa.false()),  # no report is taken after
    # when a report was last stored for the task (seconds since the epoch; no time is kept with a report): the
    # quiet period of a local task's batch, timed alike by every collector process
    sa.Column("last_arrival", sa.Float),
    # reports stored and in no batch yet: kept with them by the writer, and by batch formation (in their transactions)
    sa.Column("waiting", sa.BigInteger, nullable=False, server_default="0"),
)
tokens = sa.Table(
    "tokens", metadata["collector"],
    sa.Column("token_hash", sa.LargeBinary(32), primary_key=True),  # SHA-256 of the token: the token is not kept
    sa.Column("task_id", sa.String(32), nullable=False),
    sa.Column("report_id", sa.String(32)),  # the report the token was spent on; NULL while unused
)
# one report per id and task; of spent tokens only (a token's spending then inserts its entry, and deletes none)
sa.Index("one_report_per_id", tokens.c.task_id, tokens.c.report_id, unique=True,
         sqlite_where=tokens.c.report_id.is_not(None), postgresql_where=tokens.c.report_id.is_not(None))
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
task_numbers = sa.Table(  # each task's number: the short key its encapsulations are kept under (one made per task)
    "task_numbers", metadata["collector"],
    sa.Column("number", sa.Integer, primary_key=True),
    sa.Column("task_id", sa.String(32), nullable=False),
    sa.UniqueConstraint("task_id", name="one_number_per_task"),
)
encapsulations = sa.Table(  # replays: no two accepted messages of a task share an HPKE encapsulated key
    "encapsulations", metadata["collector"],
    # the task's number (task_numbers), not its 32-character id: a row of 33-41 bytes instead of 65-66, and about
    # 7 of them a report at random places (collector_writer.writer_connection)
    sa.Column("task", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("digest", sa.LargeBinary(32), primary_key=True),  # SHA-256 of the encapsulated key (tasks.py)
    sqlite_with_rowid=False,  # kept in digest order, not arrival order; no link to a report or a token
)

# ---- the analyzer -----------------------------------------------------------------------------------------
analyzer_tasks = sa.Table(
    "analyzer_tasks", metadata["analyzer"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("task", sa.Text, nullable=False),
    sa.Column("key_id", sa.Integer, nullable=False),  # the HPKE key id its clients see (0..255)
    sa.Column("created", sa.Float, nullable=False),  # seconds since the epoch (the next task's key id follows)
    sa.Column("sealed_key", sa.LargeBinary, nullable=False),  # the private key sealed under the KEK (keys.py)
    sa.Column("kek_id", sa.String(16), nullable=False),  # which KEK sealed it
    sa.Column("candidates", sa.Text),  # the public items a frequency task answers (JSON list); NULL: every item
)
aggregates = sa.Table(
    "aggregates", metadata["analyzer"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("aggregate", sa.LargeBinary, nullable=False),  # the analyzer's aggregate (aggregate_codec.py: .npz)
    sa.Column("batches", sa.Integer, nullable=False),
    sa.Column("reports", sa.Integer, nullable=False),
    sa.Column("unopened", sa.Integer, nullable=False),  # messages that would not open (wrong key, tampered)
    sa.Column("duplicates", sa.Integer, nullable=False, server_default="0"),  # repeated encapsulations dropped
    sa.Column("messages", sa.BigInteger, nullable=False, server_default="0"),  # the aggregate's counted messages
    sa.Column("malformed", sa.BigInteger, nullable=False, server_default="0"),  # and those that broke the layout
)
applied_batches = sa.Table(
    "applied_batches", metadata["analyzer"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("batch_id", sa.String(32), primary_key=True),
)
opened_messages = sa.Table(  # a candidates task's opened messages (the layout's packed rows), per batch and part,
    "opened_messages", metadata["analyzer"],  # so that candidates added later are answered (analyzer.add_candidates)
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("batch_id", sa.String(32), primary_key=True),
    sa.Column("part", sa.Integer, primary_key=True),
    sa.Column("records", sa.LargeBinary, nullable=False),
)
partition_progress = sa.Table(  # a partitioned batch's partitions aggregated so far, so that an analyzer stopped part
    "partition_progress", metadata["analyzer"],  # way goes on where it stopped (analyzer.apply_partitioned_batch)
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("batch_id", sa.String(32), primary_key=True),
    sa.Column("part", sa.Integer, primary_key=True),
    sa.Column("basis", sa.LargeBinary(32), nullable=False),  # SHA-256 of the manifest and the task's candidates
    sa.Column("aggregate", sa.LargeBinary, nullable=False),  # aggregate_codec's encoding
    sa.Column("opened", sa.BigInteger, nullable=False),
    sa.Column("unopened", sa.BigInteger, nullable=False),
)
applied_encapsulations = sa.Table(  # a local task's applied messages, so no later batch repeats one
    "applied_encapsulations", metadata["analyzer"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("digest", sa.LargeBinary(32), primary_key=True),  # SHA-256 of the encapsulated key (tasks.py)
    sqlite_with_rowid=False,
)

def identity_columns() -> list[sa.Column]:
    """A multi-round task's columns of its organisation (service/rounds.py): its public key, its signature of the
    task's document, and the roster it signed (JSON) once enrollment was complete."""
    return [sa.Column("organisation_key", sa.LargeBinary), sa.Column("task_signature", sa.LargeBinary),
            sa.Column("signed_roster", sa.Text)]


def token_columns() -> list[sa.Column]:
    """A round server's enrollment tokens (service/roster.py's Roster): the token's hash, its task, and the roster
    index it enrolled."""
    return [sa.Column("token_hash", sa.LargeBinary(32), primary_key=True),
            sa.Column("task_id", sa.String(32), nullable=False),
            sa.Column("user", sa.Integer)]  # the roster index the token enrolled; NULL while unused


def roster_columns() -> list[sa.Column]:
    """A round server's roster (service/roster.py's Roster): each enrolled user's keys and his secret's hash."""
    return [sa.Column("task_id", sa.String(32), primary_key=True),
            sa.Column("user", sa.Integer, primary_key=True),
            sa.Column("public_key", sa.LargeBinary, nullable=False),  # the user's HPKE public key (raw)
            sa.Column("secret_hash", sa.LargeBinary(32), nullable=False),  # SHA-256 of the secret he authenticates with
            sa.Column("identity_key", sa.LargeBinary),  # his Ed25519 public key (raw)
            sa.Column("binding", sa.LargeBinary)]  # HMAC of his keys under his token's binding half (the organisation's)


# ---- the sharing server ------------------------------------------------------------------------------------
# the round driver's tables (service/rounds.py): a task's open round and what its coordinator published, the
# messages users sent the server in each round, and those they relay to each other (sealed to the recipient)
sharing_tasks = sa.Table(
    "sharing_tasks", metadata["sharing"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("task", sa.Text, nullable=False),  # the task's public JSON
    sa.Column("status", sa.String(16), nullable=False),  # enrolling, running, released, failed
    sa.Column("round", sa.Integer, nullable=False),  # the open round's number (1, 2, ...); 0 while enrolling
    sa.Column("round_name", sa.String(32)),  # its name, as the protocol declares it
    sa.Column("deadline", sa.Float),  # the open round's end (seconds since the epoch); NULL while enrolling
    sa.Column("published", sa.Text, nullable=False),  # the coordinator's state: the lists it published (JSON)
    sa.Column("outcome", sa.Text),  # the release's JSON, or why nothing was released
    *identity_columns(),
)
sharing_tokens = sa.Table(
    "sharing_tokens", metadata["sharing"],
    *token_columns(),
)
roster = sa.Table(
    "roster", metadata["sharing"],
    *roster_columns(),
)
relayed_messages = sa.Table(
    "relayed_messages", metadata["sharing"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("round", sa.Integer, primary_key=True),
    sa.Column("sender", sa.Integer, primary_key=True),
    sa.Column("recipient", sa.Integer, primary_key=True),
    sa.Column("sealed", sa.LargeBinary, nullable=False),  # sealed to the recipient: the server cannot open it
    sa.Column("signature", sa.LargeBinary),  # the sender's Ed25519 signature of the sealed bytes
    sa.Index("relayed_to", "task_id", "round", "recipient", "sender"),  # a user's inbox
    sqlite_with_rowid=False,
)
round_messages = sa.Table(
    "round_messages", metadata["sharing"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("round", sa.Integer, primary_key=True),  # the round's number (DPDS: 1 keys, 2 masked sums, 3 reveals)
    sa.Column("user", sa.Integer, primary_key=True),
    sa.Column("message", sa.LargeBinary, nullable=False),  # empty in a round whose messages are all relayed
    sa.Column("signature", sa.LargeBinary),  # the sender's Ed25519 signature of the message
)
SHARING_TABLES = {"tasks": sharing_tasks, "messages": round_messages, "relayed": relayed_messages,
                  "tokens": sharing_tokens, "roster": roster}


def default_url(role: str) -> str:
    """The embedded default: a SQLite file in the working folder."""
    return f"sqlite:///privagg-{role}.db"


log = logging.getLogger("privagg.storage")

# Waiting for a lock (PostgreSQL's lock_timeout, SQLite's busy_timeout). Above the longest a writer holds one
# in normal work: forming a batch of 10^6 reports of 300 bytes (one UPDATE) took 15 s on PostgreSQL on 2
# shared cores, and a report's group commit waits behind it (on PostgreSQL when the batch is its task's, on
# SQLite always: one writer at a time). Below the SDK's 30 s request timeout: a report that cannot be stored
# is answered 503 (the SDK sends it again) while its client still listens, instead of a writer waiting
# forever behind a table someone locked.
LOCK_TIMEOUT = 20.0
# One statement's longest run (PostgreSQL's statement_timeout). The batch of 10^6 reports above took 15 s to
# form, 5 s to read for delivery, 2 s to delete and 6 s to vacuum: 300 s is 20 times the longest, for larger
# reports and slower disks, and still stops a runaway statement (and the locks it holds) within minutes.
STATEMENT_TIMEOUT = 300.0
CONNECT_TIMEOUT = 10  # seconds for a PostgreSQL server to answer a new connection (libpq waits forever by default)
WAL_SIZE_LIMIT = 4 << 20  # bytes SQLite cuts its WAL back to after a checkpoint: about wal_autocheckpoint's 1,000 pages
SIDE_FILES = ("-wal", "-shm", "-journal")  # SQLite's files beside the database, created with its mode
READ = "privagg_read"  # the execution option of :func:`reading`'s connections, read by the ``begin`` listener


SECRET_QUERY = ("password", "sslpassword")  # libpq's settings a URL may carry in its query string


def shown_url(url: sa.engine.URL | str) -> str:
    """A database URL as logs and errors show it: without its password, in its user part or in its query (libpq's
    ``?password=``, which SQLAlchemy's own masking leaves: a reviewer found it in the start-up log). A string that is
    no URL (a bare path) is refused naming ``db``, as :func:`connect` refuses it."""
    parsed = _parsed(url) if isinstance(url, str) else url
    hidden = {k: "***" for k in parsed.query if k.lower() in SECRET_QUERY}
    return (parsed.update_query_dict(hidden) if hidden else parsed).render_as_string(hide_password=True)


def connect(url: str, role: str, lock_timeout: float = LOCK_TIMEOUT,
            statement_timeout: float | None = STATEMENT_TIMEOUT, kek=None, upgrade: bool = False,
            create: bool = True) -> sa.Engine:
    """An engine for ``role``'s database at ``url`` (SQLite or PostgreSQL), its schema brought to the latest
    version (:func:`migrate`); a collector's database is scrubbed once (:func:`scrub`: a release that a crash
    cut short before its scrub).

    SQLite: WAL mode with fully synchronous commits, ``secure_delete`` on (deleted rows are overwritten with
    zeros), the WAL cut back to :data:`WAL_SIZE_LIMIT` after checkpoints, ``busy_timeout`` = ``lock_timeout``.
    A new database file is created mode 0600 before SQLite opens it (SQLite gives its -wal and -shm files the
    database's mode). An existing analyzer database, or one of its -wal, -shm or -journal files, that group
    or others may read or write is refused (it holds the private keys); a collector's that they may write is
    refused (they could add reports or spend tokens), one they may only read is logged as a warning (its
    reports are sealed to the analyzer's key: reading them needs the analyzer's database too, which is
    refused when open; and collectors created before this check, 0644 under umask 022, keep running).
    PostgreSQL: every session with ``lock_timeout`` and ``statement_timeout`` (seconds; None: no statement
    timeout) and a :data:`CONNECT_TIMEOUT`. Defaults and their reasons: :data:`LOCK_TIMEOUT`,
    :data:`STATEMENT_TIMEOUT`.

    The database must be ``role``'s: another role's is refused, naming both (:func:`check_role`). A new database
    (a SQLite file that does not exist, or a database with no privagg table) is created at the latest schema
    version only with ``create``, else refused, naming the commands that make one: the library's callers (tests,
    demos) make their own databases; the services (``privagg serve``) and the operator's commands other than
    ``privagg task create`` and ``privagg db upgrade --create`` pass ``create=False``. One at an older version is
    refused, naming the command that upgrades it (``privagg db upgrade``: a service never upgrades a database
    other processes of an older release may be using), unless ``upgrade``. One at a version this release does not
    know (a newer release's) is refused, naming the newer release's ``privagg db downgrade`` that takes it back to
    this release's newest version (:mod:`privagg.service.schema_versions`). ``kek``: the key-encryption key of the
    analyzer or S2 (:mod:`privagg.service.keys`), which their migrations a0003 and s2_0002 need to seal the private
    keys an older database kept raw.

    Raises :class:`ParameterError` (field ``db``) naming what is wrong instead of a driver's traceback: a
    folder that does not exist, a file or folder the service cannot write, a file mode as above, a database
    SQLite cannot open, a PostgreSQL server that does not accept the connection (its host and the reason).
    """
    return _open(url, role, lock_timeout, statement_timeout, kek, upgrade, create)[0]


def upgrade_database(url: str, role: str, kek=None, create: bool = False) -> tuple[str | None, str]:
    """``privagg db upgrade``: ``role``'s database at ``url`` brought to the latest schema version (made, with
    ``create``); (its version before, None if it was made; the version now)."""
    engine, before, now = _open(url, role, LOCK_TIMEOUT, STATEMENT_TIMEOUT, kek, True, create)
    engine.dispose()
    return before, now


def serving(url: str, role: str, **options) -> sa.Engine:
    """:func:`connect` (``options``: its) for a service: this process then the one that serves ``role`` over the
    database (:func:`~privagg.service.process_lock.hold`), or a ParameterError naming ``db`` if another does."""
    engine = connect(url, role, create=False, **options)
    try:
        hold(engine, role)
    except ParameterError:
        engine.dispose()
        raise
    return engine


def downgrade_database(url: str, role: str, to: str, drop_ledger: bool = False) -> tuple[str, str]:
    """``privagg db downgrade``: ``role``'s existing database at ``url`` taken back to the older schema version ``to``
    (:func:`~privagg.service.schema_versions.downgrade`: one transaction, refused with nothing changed where a step
    does not go back, or would drop a budget ledger with rows unless ``drop_ledger``); (its version before, the
    version now)."""
    engine = _checked_engine(url, role, LOCK_TIMEOUT, STATEMENT_TIMEOUT, False, False)
    try:
        check_not_served(engine, role)
        return downgrade(engine, role, to, drop_ledger)
    finally:
        engine.dispose()


def _checked_engine(url: str, role: str, lock_timeout: float, statement_timeout: float | None, upgrade: bool,
                    create: bool) -> sa.Engine:
    """An engine over ``role``'s database at ``url`` that opens, and is ``role``'s (:func:`check_role`)."""
    if role not in ROLES:
        raise ParameterError("role", f"one of {', '.join(ROLES)}", role)
    lock_timeout = _seconds("lock_timeout", lock_timeout)
    statement_timeout = None if statement_timeout is None else _seconds("statement_timeout", statement_timeout)
    engine = _engine(url, role, lock_timeout, statement_timeout, create)
    try:
        _probe(engine)
        check_role(engine, role, create, upgrade)
    except BaseException:
        engine.dispose()
        raise
    return engine


def _open(url: str, role: str, lock_timeout: float, statement_timeout: float | None, kek, upgrade: bool,
          create: bool) -> tuple[sa.Engine, str | None, str]:
    """:func:`connect`'s engine, with the schema version it found (None: a new database) and the one it is at."""
    engine = _checked_engine(url, role, lock_timeout, statement_timeout, upgrade, create)
    try:
        if upgrade:
            check_not_served(engine, role)
        before, now = migrate(engine, role, kek, upgrade)
        if role == "collector":
            scrub(engine)
    except BaseException:
        engine.dispose()
        raise
    return engine, before, now


def _not_made(role: str, url: str, what: str) -> ParameterError:
    """The refusal of a database that does not exist (``what``), naming the commands that make ``role``'s."""
    task = "" if role == "collector" else "`privagg task create` (which makes the database its task goes in) or "
    return ParameterError("db", f"an existing {role} database (a new one is made only by {task}`privagg db upgrade "
                          f"--create --role {role} --db URL`: no other command takes a mistyped URL for a new "
                          "database)", f"{url}{what}")


def check_role(engine: sa.Engine, role: str, create: bool = False, upgrade: bool = False) -> None:
    """Refuse a database that is not ``role``'s (a ParameterError naming ``db``, both roles and the URL): its
    ``privagg_database`` row names another role, or, in a database of an older release, the Alembic version
    tables do. A database with no privagg table is new: refused unless ``create``. One where an older release
    wrote two roles' tables (a command pointed at another party's database) is refused unless ``upgrade``
    states which it is (``privagg db upgrade --role ROLE``, whose migration records it)."""
    shown = shown_url(engine.url)
    with reading(engine) as c:
        names = set(sa.inspect(c).get_table_names())
        stored = set(c.execute(sa.select(database_role[role].c.role)).scalars()) if "privagg_database" in names \
            else {r for r in ROLES if f"alembic_version_{r}" in names}
    if stored == {role} or (not stored and create) or (role in stored and upgrade):
        return
    if not stored:
        tables = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
        raise _not_made(role, shown, ", an empty database" if not names else f", no privagg database (its tables: "
                        f"{tables})")
    if len(stored) == 1:
        raise ParameterError("db", f"{a_role(role)} database", f"{shown}, {a_role(stored.pop())} database")
    raise ParameterError("db", f"{a_role(role)} database", f"{shown}, which holds the tables of "
                         f"{' and '.join(sorted(stored))} (an older release let a command write them into another "
                         f"party's database): state its role once with `privagg db upgrade --role ROLE --db URL`")


def record_role(role: str) -> None:
    """The Alembic step that names the database's role (migrations a0007, c0006, s0002, s1_0002, s2_0003)."""
    from alembic import op

    table = op.create_table("privagg_database", sa.Column("role", sa.String(16), primary_key=True))
    op.bulk_insert(table, [{"role": role}])


IDENTITY_COLUMNS = (("organisation_key", "task_signature", "signed_roster"), ("identity_key", "binding"),
                    ("signature",), ("signature",))  # a round server's tasks, roster, messages, relayed messages


def add_identities(tables: tuple[str, str, str, str], revision: str) -> None:
    """The Alembic step that adds the identities of issue 46 (migrations s0004, s1_0004) to a round server's
    ``tables`` (tasks, roster, messages, relayed messages: :data:`IDENTITY_COLUMNS`) and fails every task enrolling
    or running at the upgrade: its users enrolled no identity and no organisation signed it, so it cannot go on; it
    keeps its round and what was published."""
    import json

    from alembic import op

    for table, columns in zip(tables, IDENTITY_COLUMNS):
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.add_column(sa.Column(column, sa.Text if column == "signed_roster" else sa.LargeBinary))
    unsigned = (f"the task was enrolling or running when its server was upgraded to signed rosters ({revision}): its "
                "users enrolled no identity and no organisation signed it, so it cannot go on; nothing was released "
                "(create it again, with privagg task create --organisation-key)")
    tasks = sa.table(tables[0], sa.column("status"), sa.column("deadline"), sa.column("outcome"))
    op.get_bind().execute(sa.update(tasks).where(tasks.c.status.in_(("enrolling", "running"))).values(
        status="failed", deadline=None, outcome=json.dumps({"failed": unsigned})))


def drop_identities(tables: tuple[str, str, str, str]) -> None:
    """:func:`add_identities` undone: its columns dropped (the failed tasks stay failed)."""
    from alembic import op

    for table, columns in zip(tables, IDENTITY_COLUMNS):
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.drop_column(column)


def _seconds(field: str, value: float) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ParameterError(field, "a number of seconds > 0", value) from None
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ParameterError(field, "a number of seconds > 0", value)
    return seconds


def _ms(seconds: float | None) -> int:
    return 0 if seconds is None else max(1, round(seconds * 1000))


DB_URL = "a database URL (sqlite:///FILE or postgresql+psycopg://USER@HOST/DB)"


def _parsed(url: str) -> sa.engine.URL:
    try:
        return sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        raise ParameterError("db", DB_URL, url) from None


def _engine(url: str, role: str, lock_timeout: float, statement_timeout: float | None, create: bool = True) \
        -> sa.Engine:
    parsed = _parsed(url)
    shown = shown_url(parsed)
    try:
        parsed.get_dialect().import_dbapi()  # its driver: one not installed (postgresql+psycopg2) is refused here
    except sa.exc.NoSuchModuleError:
        raise ParameterError("db", DB_URL, shown) from None
    except ImportError as err:
        raise ParameterError("db", f"{DB_URL} with an installed driver", f"{shown} (no module {err.name})") from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ParameterError("db", DB_URL, shown)
    if parsed.get_backend_name() == "sqlite" and parsed.host:  # sqlite://FILE: the file taken for a host
        raise ParameterError("db", DB_URL, f"{shown} (a file after two slashes, where SQLite takes three)")
    if parsed.get_backend_name() == "sqlite" and sqlite_path(parsed) is None:  # a reviewer's finding
        raise ParameterError("db", f"{DB_URL}, a file by its path", f"{shown} (" + (
            "an in-memory database: its tasks and keys would be gone when the process ends" if not parsed.database
            or parsed.database == ":memory:" else "a file: URI, whose file the services could not lock nor check "
            "the mode of") + ")")
    if parsed.get_backend_name() == "postgresql":
        options = f"-c lock_timeout={_ms(lock_timeout)} -c statement_timeout={_ms(statement_timeout)}"
        if isinstance(parsed.query.get("options"), str):
            options += " " + parsed.query["options"]  # the URL's own settings come after ours, so they win
        args: dict = {"options": options}
        if "connect_timeout" not in parsed.query:
            args["connect_timeout"] = CONNECT_TIMEOUT
        engine = sa.create_engine(parsed, pool_size=10, max_overflow=20, pool_pre_ping=True, connect_args=args)

        @sa.event.listens_for(engine, "begin")
        def _begin_postgresql(connection) -> None:
            if connection.get_execution_options().get(READ):
                # one snapshot for the whole transaction: at READ COMMITTED each statement would see its own, and
                # two counts read in one transaction could straddle a commit (a batch formed between them)
                connection.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

        return engine
    path = sqlite_path(parsed)
    if path is not None:
        try:
            _prepare_file(path, role, parsed.render_as_string(), create)
        except OSError as err:  # a name too long, a loop of links, ...
            raise ParameterError("db", "a SQLite file the system can open", f"{shown} ({err.strerror})") from None
    engine = sa.create_engine(parsed, connect_args={"timeout": lock_timeout, "check_same_thread": False})

    @sa.event.listens_for(engine, "connect")
    def _pragmas(connection, _record) -> None:
        connection.isolation_level = None  # the transactions below are ours, not the driver's
        cursor = connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={_ms(lock_timeout)}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA secure_delete=ON")  # a deleted row's bytes are overwritten, not left in free space
        cursor.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(connection) -> None:
        if connection.get_execution_options().get(READ):
            # a deferred transaction: a snapshot read that never takes the write lock (WAL readers do not wait)
            connection.exec_driver_sql("BEGIN")
        else:
            # take the write lock up front: a read that later writes would otherwise fail at once, not wait,
            # when another writer committed in between (SQLITE_BUSY_SNAPSHOT)
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _prepare_file(path: Path, role: str, url: str, create: bool) -> None:
    """Check the folder and an existing database file, or create the file mode 0600 (so no moment passes with
    the file open to others: SQLite would create it with the umask's mode, 0644 under umask 022); without
    ``create``, a file that does not exist is refused."""
    if not create and not path.exists():
        raise _not_made(role, url, ": no such file")
    folder = path.parent
    if not folder.is_dir():
        raise ParameterError("db", f"a SQLite file in an existing folder: {folder} "
                             f"{'is not a folder' if folder.exists() else 'does not exist'}", url)
    if not _writable(folder, folder=True):
        raise ParameterError("db", f"a SQLite file in a folder the service can write (SQLite keeps its -wal and "
                             f"-shm files beside the database): {folder} is not writable ({_owner(folder)})", url)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # the umask can only narrow 0600
    except FileExistsError:
        pass
    else:
        try:
            os.fchmod(fd, 0o600)  # exactly 0600 whatever the umask (a narrower one would keep the owner out)
        finally:
            os.close(fd)
    if not path.is_file():
        raise ParameterError("db", f"a SQLite file: {path} is not a regular file", url)
    files = [path, *(p for p in (Path(f"{path}{s}") for s in SIDE_FILES) if p.exists())]
    for file in files:
        if not _writable(file):
            raise ParameterError("db", f"a SQLite file the service can write: {file} is not writable "
                                 f"({_owner(file)})", url)
    modes = {file: stat.S_IMODE(file.stat().st_mode) for file in files}
    fix = "chmod 600 " + " ".join(str(f) for f, m in modes.items() if m & 0o066)
    shown = "; ".join(f"{f} is mode {m:04o}" for f, m in modes.items() if m & 0o066)
    if role in ("analyzer", "sharing", "s1", "s2") and shown:
        raise ParameterError("db", f"a key store only its owner can read and write (it holds the tasks' private "
                             f"keys; group or others may read or write it: {shown}; fix with {fix})", url)
    if role == "collector" and any(m & 0o022 for m in modes.values()):
        raise ParameterError("db", f"a database that only its owner can write (others could add reports or spend "
                             f"tokens: {shown}; fix with {fix})", url)
    if shown:
        log.warning("database readable by group or others", extra={"fields": {"files": shown, "fix": fix}})


def _writable(path: Path, folder: bool = False) -> bool:
    """Whether this process may write ``path`` (and enter it, a folder), and its owner has not taken away its
    own write permission (root could write it anyway: refused alike, whoever runs the service)."""
    need = os.W_OK | (os.X_OK if folder else 0)
    if not os.access(path, need, effective_ids=os.access in os.supports_effective_ids):
        return False
    info = path.stat()
    bits = stat.S_IWUSR | (stat.S_IXUSR if folder else 0)
    return not (info.st_uid == os.geteuid() and info.st_mode & bits != bits)


def _owner(path: Path) -> str:
    info = path.stat()
    return f"mode {stat.S_IMODE(info.st_mode):04o}, owner uid {info.st_uid}, this process uid {os.geteuid()}"


def _probe(engine: sa.Engine) -> None:
    """Open one connection (the pragmas run): a database that cannot be opened is one ParameterError."""
    try:
        with engine.connect():
            pass
    except sa.exc.DBAPIError as err:
        url = engine.url
        first = (str(err.orig) if err.orig is not None else str(err)).strip().splitlines()
        reason = first[0] if first else type(err.orig).__name__
        if engine.dialect.name == "postgresql":
            found = re.search(r"port \d+ failed: (.*)", reason)
            where = f"{url.host or 'the local socket'}:{url.port or 5432}"
            raise ParameterError("db", f"a PostgreSQL server that accepts the connection ({where}: "
                                 f"{found.group(1) if found else reason})",
                                 shown_url(url)) from None
        raise ParameterError("db", f"a SQLite database the service can open and write ({url.database}: {reason})",
                             url.render_as_string()) from None


_LOCKED = ("database is locked", "lock timeout")  # SQLite's busy_timeout, PostgreSQL's lock_timeout, ran out


@contextmanager
def lock_timeouts_refused(url: str | None) -> Iterator[None]:
    """A write that waited past its lock timeout for another process's lock (:data:`LOCK_TIMEOUT`: SQLite's
    busy_timeout, PostgreSQL's lock_timeout) as one ParameterError naming the database, nothing written, instead of
    a traceback (the commands that write: task create, budget set)."""
    try:
        yield
    except sa.exc.OperationalError as err:
        if not any(words in str(err.orig) for words in _LOCKED):
            raise
        shown = "the default database" if url is None else shown_url(url)
        raise ParameterError("db", f"a database whose write lock another process lets go of within {LOCK_TIMEOUT:g} s "
                             "(another writer held it longer; nothing was written: try again)", shown) from None


@contextmanager
def reading(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A connection in a read-only transaction, for queries that write nothing.

    On SQLite a deferred ``BEGIN``: a snapshot that never takes the write lock, so a read neither waits for
    a writer nor holds one up (every other transaction begins ``BEGIN IMMEDIATE``). On PostgreSQL a ``READ
    ONLY`` transaction (a write in it fails) at ``REPEATABLE READ``: one snapshot too, so that what its queries
    count adds up (a collector's status once read a batch's reports as neither waiting nor in a batch: the
    reports counted after a batch was formed, the batches before; a read-only transaction is never refused
    for serialization). The connection carries the :data:`READ` execution option, which the engine's ``begin``
    listener reads."""
    with engine.connect().execution_options(**{READ: True}) as connection, connection.begin():
        yield connection


def scrub(engine: sa.Engine) -> None:
    """Erase what the database keeps of deleted rows, as far as the database can; the collector calls it right
    after a released batch's reports are deleted, and :func:`connect` once at its start.

    SQLite: ``PRAGMA wal_checkpoint(TRUNCATE)``. The WAL's frames (every version of every page written since
    the last truncation, released ciphertexts among them) are copied into the database file and the WAL is cut
    to zero bytes; with ``secure_delete`` on, the pages copied hold zeros where deleted rows were, and freed
    pages are zeroed. Afterwards neither the database file, nor the -wal, nor the -shm holds a deleted
    report's bytes. If a reader keeps an older snapshot past ``busy_timeout``, the checkpoint is left
    incomplete: a warning is logged, and the next scrub does it. What the file system or the disk keeps of
    overwritten or truncated blocks (copy-on-write file systems, SSD wear levelling, snapshots) is beyond
    SQLite: put the database on encrypted storage.

    PostgreSQL: a plain ``VACUUM`` of the reports table (and its TOAST table), on an autocommit connection
    (VACUUM cannot run in a transaction block). It marks the space of dead rows (deleted reports) reusable;
    their bytes stay in the table's files until new rows overwrite them, and a dead row that a still-running
    transaction may see is kept until a later vacuum. ``VACUUM FULL`` would rewrite the table without them,
    but it takes an ACCESS EXCLUSIVE lock (no report stored meanwhile) and the old files' blocks remain on
    the disk; it is not run here. The WAL segments (until recycled), archived WAL, replicas and base backups
    keep copies of every report that was ever stored. So for PostgreSQL the operator's part is encrypted
    storage (disk or tablespace encryption) and a documented retention for WAL archives and backups, after
    which released ciphertexts are gone; run this database's VACUUM FULL in a maintenance window if the
    table's files must be rewritten. A lock or statement timeout, or an unreachable server, is logged as a
    warning (the release itself is done; the next scrub, or autovacuum, vacuums again).
    """
    if engine.dialect.name == "sqlite":
        raw = engine.raw_connection()
        try:
            cursor = raw.cursor()
            busy, _frames, _copied = cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            cursor.close()
            error = "busy" if busy else None  # a reader or writer held the WAL past busy_timeout
        except engine.dialect.dbapi.OperationalError as err:
            error = type(err).__name__
        finally:
            raw.close()
        if error:
            log.warning("scrub incomplete", extra={"fields": {"error": error}})
        return
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.exec_driver_sql(f"VACUUM {connection.dialect.identifier_preparer.format_table(reports)}")
    except sa.exc.OperationalError as err:
        log.warning("scrub incomplete", extra={"fields": {"error": type(err.orig).__name__}})


def insert_if_absent(connection: sa.Connection, table: sa.Table):
    """An INSERT that does nothing where a row with the same primary key exists (both dialects)."""
    if connection.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table).on_conflict_do_nothing()


_COMPILED: dict[tuple[str, sa.Executable], tuple[str, tuple[str, ...] | None]] = {}


def execute_driver(connection: sa.Connection, statement: sa.Executable, rows: list[dict]) -> sa.CursorResult:
    """``statement`` (a module-level constant: it is compiled once per dialect and kept) executed once per row of
    ``rows`` (at least one: its bind parameters' names to values that are already the driver's types: str,
    int, float, bytes, None), through the driver's own ``executemany``; one row executes as a single
    statement, whose result can be read.

    SQLAlchemy's per-row work (a type processor per value, the parameters rebuilt per row, an IN list
    compiled afresh) was most of the collector's CPU per report, which stores about one row per message."""
    key = (connection.dialect.name, statement)
    if key not in _COMPILED:
        compiled = statement.compile(dialect=connection.dialect)
        _COMPILED[key] = str(compiled), compiled.positiontup if connection.dialect.positional else None
    sql, names = _COMPILED[key]
    if names is not None:
        rows = list(map(operator.itemgetter(*names), rows)) if len(names) > 1 else [(row[names[0]],) for row in rows]
    return connection.exec_driver_sql(sql, rows[0] if len(rows) == 1 else rows)


DIGESTS_PER_QUERY = 500  # bound parameters per lookup (SQLite allows 32,766; fewer keeps statements short)


@functools.cache
def _digest_lookup(table: sa.Table) -> sa.Select:
    """Which of DIGESTS_PER_QUERY digests (``d0``, ``d1``, ...) of task ``task_id`` ``table`` holds (its task's key
    column is its key's first: a task id, or the collector's task number)."""
    return sa.select(table.c.digest).where(table.primary_key.columns[0] == sa.bindparam("task_id"), table.c.digest.in_(
        [sa.bindparam(f"d{i}") for i in range(DIGESTS_PER_QUERY)]))


def existing_digests(connection: sa.Connection, table: sa.Table, pairs: set[tuple[str | int, bytes]]) \
        -> set[tuple[str | int, bytes]]:
    """Which (task, digest) pairs ``table`` holds: ``encapsulations`` (the task's number) or
    ``applied_encapsulations`` (its id)."""
    found: set[tuple[str | int, bytes]] = set()
    by_task: dict[str | int, list[bytes]] = {}
    for task_id, digest in pairs:
        by_task.setdefault(task_id, []).append(digest)
    for task_id, digests in by_task.items():
        for start in range(0, len(digests), DIGESTS_PER_QUERY):
            chunk = digests[start:start + DIGESTS_PER_QUERY]
            chunk += chunk[-1:] * (DIGESTS_PER_QUERY - len(chunk))  # one statement for every lookup: the last repeated
            values = {"task_id": task_id, **{f"d{i}": d for i, d in enumerate(chunk)}}
            found.update((task_id, bytes(d)) for (d,) in execute_driver(connection, _digest_lookup(table), [values]))
    return found
