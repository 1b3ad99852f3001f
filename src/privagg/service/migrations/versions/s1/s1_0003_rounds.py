"""Rounds as data at S1: a task's open round is a number and a name with a status (enrolling, running, handover,
delivered, failed), and what S1 published (the election, R2, each item's reporters, the recovery plan) one JSON
object, where a state string per round and a column per list were (service/rounds.py, the round driver); the
relayed shares carry their round.

A task of an older release keeps its progress: "round3" becomes round 3 (sums) running with its election, R2 and
reporters published; "handover" is handed over from its stored messages, as before; a failure's reason is kept.

Revision ID: s1_0003
Revises: s1_0002
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "s1_0003"
down_revision = "s1_0002"
branch_labels = None
depends_on = None

NAMES = {1: "report", 2: "share", 3: "sums", 4: "recover"}  # TSS's rounds when this revision was written
LISTS = ("election", "survivors", "reporters", "recovery")  # the old columns, now published's keys


def _new_columns(row) -> dict:
    published = {name: json.loads(getattr(row, name)) for name in LISTS if getattr(row, name) is not None}
    reached = 1 + sum(name in published for name in ("election", "survivors", "recovery"))
    if row.state == "enrolling":
        status, number = "enrolling", 0
    elif row.state.startswith("round"):
        status, number = "running", int(row.state[5:])
    else:  # handover, delivered, or failed in the last round it reached
        status, number = row.state, min(reached, 4)
    outcome = json.dumps({"failed": row.outcome}) if row.state == "failed" and row.outcome is not None else None
    return {"status": status, "round": number, "round_name": NAMES.get(number), "published": json.dumps(published),
            "outcome": outcome}


def upgrade() -> None:
    connection = op.get_bind()
    with op.batch_alter_table("s1_tasks") as batch:
        batch.add_column(sa.Column("status", sa.String(16)))
        batch.add_column(sa.Column("round", sa.Integer))
        batch.add_column(sa.Column("round_name", sa.String(32)))
        batch.add_column(sa.Column("published", sa.Text))
    tasks = sa.table("s1_tasks", *(sa.column(name) for name in ("task_id", "state", "outcome", "status", "round",
                                                                 "round_name", "published", *LISTS)))
    for row in connection.execute(sa.select(tasks.c.task_id, tasks.c.state, tasks.c.outcome,
                                            *(tasks.c[name] for name in LISTS))).all():
        connection.execute(sa.update(tasks).where(tasks.c.task_id == row.task_id).values(**_new_columns(row)))
    with op.batch_alter_table("s1_tasks") as batch:
        batch.alter_column("status", existing_type=sa.String(16), nullable=False)
        batch.alter_column("round", existing_type=sa.Integer, nullable=False)
        batch.alter_column("published", existing_type=sa.Text, nullable=False)
        for name in ("state", *LISTS):
            batch.drop_column(name)
    op.create_table("s1_relayed", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("round", sa.Integer, primary_key=True), sa.Column("sender", sa.Integer, primary_key=True),
                    sa.Column("recipient", sa.Integer, primary_key=True),
                    sa.Column("sealed", sa.LargeBinary, nullable=False), sqlite_with_rowid=False)
    op.execute("INSERT INTO s1_relayed (task_id, round, sender, recipient, sealed) "
               "SELECT task_id, 2, sender, recipient, sealed FROM s1_shares")
    op.drop_table("s1_shares")
    op.create_index("s1_relayed_to", "s1_relayed", ["task_id", "round", "recipient", "sender"])


def downgrade() -> None:
    connection = op.get_bind()
    op.create_table("s1_shares", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("sender", sa.Integer, primary_key=True),
                    sa.Column("recipient", sa.Integer, primary_key=True),
                    sa.Column("sealed", sa.LargeBinary, nullable=False), sqlite_with_rowid=False)
    op.execute("INSERT INTO s1_shares (task_id, sender, recipient, sealed) "
               "SELECT task_id, sender, recipient, sealed FROM s1_relayed WHERE round = 2")
    op.drop_table("s1_relayed")
    with op.batch_alter_table("s1_tasks") as batch:
        batch.add_column(sa.Column("state", sa.String(16)))
        for name in LISTS:
            batch.add_column(sa.Column(name, sa.Text))
    tasks = sa.table("s1_tasks", *(sa.column(name) for name in ("task_id", "state", "outcome", "status", "round",
                                                                 "published", *LISTS)))
    for row in connection.execute(sa.select(tasks.c.task_id, tasks.c.status, tasks.c.round, tasks.c.outcome,
                                            tasks.c.published)).all():
        published = json.loads(row.published)
        connection.execute(sa.update(tasks).where(tasks.c.task_id == row.task_id).values(
            state=f"round{row.round}" if row.status == "running" else row.status,
            outcome=json.loads(row.outcome)["failed"] if row.status == "failed" and row.outcome else None,
            **{name: json.dumps(published[name]) if name in published else None for name in LISTS}))
    with op.batch_alter_table("s1_tasks") as batch:
        batch.alter_column("state", existing_type=sa.String(16), nullable=False)
        for column in ("status", "round", "round_name", "published"):
            batch.drop_column(column)
