"""The schema's versions: each role's chain of Alembic migrations (``migrations/versions/ROLE``, its own version table
``alembic_version_ROLE``), a database brought up to this release's newest version (:func:`migrate`, for
:func:`privagg.service.storage.connect` and ``privagg db upgrade``) or back to an older release's (:func:`downgrade`,
``privagg db downgrade``), and the refusal of a version this release does not know: a newer release's, which only
that release can take back (:func:`refuse_unknown`).

Every migration but two goes back: a0003 and s2_0002 sealed the private keys under the key-encryption key, and going
back would write them raw again. They say so in their module's ``IRREVERSIBLE``, which :func:`downgrade` reads before
it changes anything.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from ..errors import ParameterError

FOLDER = Path(__file__).parent / "migrations"


def a_role(role: str) -> str:
    """"a collector", "an analyzer", ...: a role with its article."""
    return f"{'an' if role in ('analyzer', 's1', 's2') else 'a'} {role}"


def alembic_config(role: str, kek=None):
    """Alembic's configuration for ``role``'s chain (its migrations read ``kek``: a0003 and s2_0002 seal with it)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("path_separator", "os")
    config.set_main_option("script_location", str(FOLDER))
    config.set_main_option("version_locations", str(FOLDER / "versions" / role))
    config.attributes["role"], config.attributes["kek"] = role, kek
    return config


def _chain(config):
    """The migrations of ``config``'s chain (Alembic's ScriptDirectory), and their versions, newest first."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(config)
    return scripts, [script.revision for script in scripts.walk_revisions()]


def chain(role: str) -> list[str]:
    """``role``'s schema versions in this release, newest first."""
    return _chain(alembic_config(role))[1]


def current_version(connection: sa.Connection, role: str) -> str | None:
    """The version ``role``'s version table holds (None: no table, or no row; several rows: all of them, joined)."""
    from alembic.migration import MigrationContext

    heads = MigrationContext.configure(connection, opts={"version_table": f"alembic_version_{role}"}) \
        .get_current_heads()
    return ", ".join(heads) if heads else None


def refuse_unknown(role: str, current: str | None, versions: list[str]) -> None:
    """A ParameterError naming ``db`` if ``current`` is not one of ``versions`` (this release's chain, newest first):
    a newer release's database, which this release cannot run or take back, but that release's ``privagg db
    downgrade`` can."""
    if current is None or current in versions:
        return
    raise ParameterError("db", f"{a_role(role)} database at a schema version this release knows (its newest is "
                         f"{versions[0]}; a newer release's database is run by that release, or first taken back with "
                         f"that release's `privagg db downgrade --role {role} --db URL --to {versions[0]}`)",
                         f"version {current}, which this release does not know")


def migrate(engine: sa.Engine, role: str, kek=None, upgrade: bool = True) -> tuple[str | None, str]:
    """Bring the ``role``'s tables to the latest schema version (Alembic ``upgrade head``): a new database always,
    one at an older version only with ``upgrade`` (else a ParameterError naming ``privagg db upgrade``), one at a
    version this release does not know never (:func:`refuse_unknown`); ``kek``: as for
    :func:`privagg.service.storage.connect`. (The version found, None for a new database; the latest.)"""
    from alembic import command

    config = alembic_config(role, kek)
    versions = _chain(config)[1]
    head = versions[0]
    with engine.begin() as connection:
        current = current_version(connection, role)
        refuse_unknown(role, current, versions)
        if current not in (None, head) and not upgrade:
            raise ParameterError("db", f"{a_role(role)} database at schema version {head}: run `privagg db upgrade "
                                 f"--role {role} --db URL` once, with no {role} process of an older release running",
                                 f"version {current}")
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    return current, head


def downgrade(engine: sa.Engine, role: str, to: str, drop_ledger: bool = False) -> tuple[str, str]:
    """Take the ``role``'s tables back to the schema version ``to`` (an older release's newest), every migration's
    ``downgrade()`` from the current version's down to the one after ``to``, in one transaction: a failure leaves the
    database as it was. Refused (a ParameterError, nothing changed): a database at a version this release does not
    know (``db``), a ``to`` not in the role's chain or not older than the current version, or a step that does not
    go back (its module's ``IRREVERSIBLE``), naming it and why (``to``); unless ``drop_ledger``, a step that drops the
    privacy budget ledger (its module's ``DROPS_LEDGER``: a0008, s0006, s1_0006) while it holds rows (``to``: an
    upgrade back would start it empty, and the tasks charged so far would no longer count against their budgets); a
    step that fails (a table in its way, a lock held past the timeout) names it (``db``). (The version before;
    ``to``.)"""
    from alembic import command

    config = alembic_config(role)
    scripts, versions = _chain(config)
    with engine.begin() as connection:
        current = current_version(connection, role)
        refuse_unknown(role, current, versions)
        oldest_first = ", ".join(reversed(versions))
        if to not in versions:
            raise ParameterError("to", f"one of the {role} schema versions of this release (oldest first: "
                                 f"{oldest_first})", to)
        if current is None or versions.index(to) <= versions.index(current):
            raise ParameterError("to", f"a {role} schema version older than the database's, {current} (oldest first: "
                                 f"{oldest_first})", to)
        steps = versions[versions.index(current):versions.index(to) + 1]  # newest first, from the current one to ``to``
        modules = [(version, scripts.get_revision(version).module) for version in steps[:-1]]  # whose downgrade runs
        for version, module in modules:  # first what cannot go back at all, then what needs --drop-budget-ledger
            why = getattr(module, "IRREVERSIBLE", None)
            if why is not None:
                raise ParameterError("to", f"{version} or a newer {role} schema version (migration {version} does not "
                                     f"go back: {why}; the database was left at {current})", to)
        for version, module in modules:
            rows = {t: connection.execute(sa.select(sa.func.count()).select_from(sa.table(t))).scalar_one()
                    for t in getattr(module, "DROPS_LEDGER", ()) if not drop_ledger}
            if any(rows.values()):
                held = " and ".join(f"{n:,} row{'s' * (n != 1)} of {t}" for t, n in rows.items() if n)
                raise ParameterError("to", f"{version} or a newer {role} schema version while the privacy budget "
                                     f"ledger holds rows (migration {version}'s downgrade drops it: {held}; upgrading "
                                     "again would start it empty, and the tasks charged so far would no longer count "
                                     "against their populations' budgets), or --drop-budget-ledger once it is backed "
                                     f"up (the database was left at {current})", to)
        config.attributes["connection"] = connection
        for version, older in zip(steps, steps[1:]):
            try:
                command.downgrade(config, older)
            except sa.exc.SQLAlchemyError as err:
                cause = getattr(err, "orig", None) or err
                first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
                raise ParameterError("db", f"{a_role(role)} database migration {version}'s downgrade can run on "
                                     f"(nothing was changed: the database is still at {current})",
                                     f"{type(cause).__name__}: {first}") from None
    return current, to
