"""Identities (issue 46): a task's organisation key, its signature of the task and the roster it signed; each
enrolled user's identity key and his token's binding; each stored message's signature by its sender
(service/rounds.py, docs/privacy.md, "Dishonest parties").

A task enrolling or running at the upgrade has no organisation, and its users enrolled no identity: it cannot go on
(its devices' SDK pins an organisation key and refuses an unsigned task; a server that ran it unsigned is what the
signatures close), so the upgrade fails it, saying why; it keeps its round and what was published. Finish tasks, or
create them again, around the upgrade.

Revision ID: s1_0004
Revises: s1_0006 (the budget's, merged first; this revision was numbered before it)
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "s1_0004"
down_revision = "s1_0006"
branch_labels = None
depends_on = None

COLUMNS = {"s1_tasks": ("organisation_key", "task_signature", "signed_roster"),
           "s1_roster": ("identity_key", "binding"), "s1_messages": ("signature",), "s1_relayed": ("signature",)}


UNSIGNED = ("the task was enrolling or running when its server was upgraded to signed rosters (%s): its users "
            "enrolled no identity and no organisation signed it, so it cannot go on; nothing was released (create it "
            "again, with privagg task create --organisation-key)" % revision)


def upgrade() -> None:
    for table, columns in COLUMNS.items():
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.add_column(sa.Column(column, sa.Text if column == "signed_roster" else sa.LargeBinary))
    tasks = sa.table("s1_tasks", sa.column("status"), sa.column("deadline"), sa.column("outcome"))
    op.get_bind().execute(sa.update(tasks).where(tasks.c.status.in_(("enrolling", "running"))).values(
        status="failed", deadline=None, outcome=json.dumps({"failed": UNSIGNED})))


def downgrade() -> None:
    for table, columns in COLUMNS.items():
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.drop_column(column)
