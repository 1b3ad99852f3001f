"""Rounds as data: a task's open round is a number and a name with a status (enrolling, running, released,
failed), and what the coordinator published a JSON object, where a state string per round and a column per
list were (service/rounds.py, the round driver); relayed messages carry their round.

A task of an older release keeps its progress: "round2" becomes round 2 (masked_sum) running with its senders
published, and so on; its relayed backups are round 1's.

Revision ID: s0003
Revises: s0002
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "s0003"
down_revision = "s0002"
branch_labels = None
depends_on = None

NAMES = {1: "advertise", 2: "masked_sum", 3: "reveal"}  # DPDS's and DPDG's rounds when this revision was written


def _new_columns(state: str, senders, survivors) -> dict:
    published = {}
    if senders is not None:
        published["senders"] = json.loads(senders)
    if survivors is not None:
        published["survivors"] = json.loads(survivors)
    reached = 1 if senders is None else 2 if survivors is None else 3
    if state == "enrolling":
        status, number = "enrolling", 0
    elif state in ("round1", "round2", "round3"):
        status, number = "running", int(state[-1])
    else:  # released after round 3, or failed in the last round it reached
        status, number = state, reached
    return {"status": status, "round": number, "round_name": NAMES.get(number), "published": json.dumps(published)}


def upgrade() -> None:
    connection = op.get_bind()
    with op.batch_alter_table("sharing_tasks") as batch:
        batch.add_column(sa.Column("status", sa.String(16)))
        batch.add_column(sa.Column("round", sa.Integer))
        batch.add_column(sa.Column("round_name", sa.String(32)))
        batch.add_column(sa.Column("published", sa.Text))
    tasks = sa.table("sharing_tasks", sa.column("task_id"), sa.column("state"), sa.column("senders"),
                     sa.column("survivors"), sa.column("status"), sa.column("round"), sa.column("round_name"),
                     sa.column("published"))
    for row in connection.execute(sa.select(tasks.c.task_id, tasks.c.state, tasks.c.senders, tasks.c.survivors)).all():
        connection.execute(sa.update(tasks).where(tasks.c.task_id == row.task_id).values(
            **_new_columns(row.state, row.senders, row.survivors)))
    with op.batch_alter_table("sharing_tasks") as batch:
        batch.alter_column("status", existing_type=sa.String(16), nullable=False)
        batch.alter_column("round", existing_type=sa.Integer, nullable=False)
        batch.alter_column("published", existing_type=sa.Text, nullable=False)
        batch.drop_column("state")
        batch.drop_column("senders")
        batch.drop_column("survivors")
    op.create_table("relayed_messages", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("round", sa.Integer, primary_key=True), sa.Column("sender", sa.Integer, primary_key=True),
                    sa.Column("recipient", sa.Integer, primary_key=True),
                    sa.Column("sealed", sa.LargeBinary, nullable=False), sqlite_with_rowid=False)
    op.execute("INSERT INTO relayed_messages (task_id, round, sender, recipient, sealed) "
               "SELECT task_id, 1, sender, recipient, sealed FROM relayed_shares")
    op.drop_table("relayed_shares")  # with its index relayed_to, whose name the new one takes
    op.create_index("relayed_to", "relayed_messages", ["task_id", "round", "recipient", "sender"])


def downgrade() -> None:
    connection = op.get_bind()
    op.create_table("relayed_shares", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("sender", sa.Integer, primary_key=True),
                    sa.Column("recipient", sa.Integer, primary_key=True),
                    sa.Column("sealed", sa.LargeBinary, nullable=False), sqlite_with_rowid=False)
    op.execute("INSERT INTO relayed_shares (task_id, sender, recipient, sealed) "
               "SELECT task_id, sender, recipient, sealed FROM relayed_messages WHERE round = 1")
    op.drop_table("relayed_messages")
    op.create_index("relayed_to", "relayed_shares", ["task_id", "recipient", "sender"])
    with op.batch_alter_table("sharing_tasks") as batch:
        batch.add_column(sa.Column("state", sa.String(16)))
        batch.add_column(sa.Column("senders", sa.Text))
        batch.add_column(sa.Column("survivors", sa.Text))
    tasks = sa.table("sharing_tasks", sa.column("task_id"), sa.column("state"), sa.column("senders"),
                     sa.column("survivors"), sa.column("status"), sa.column("round"), sa.column("published"))
    for row in connection.execute(sa.select(tasks.c.task_id, tasks.c.status, tasks.c.round,
                                            tasks.c.published)).all():
        published = json.loads(row.published)
        state = f"round{row.round}" if row.status == "running" else row.status
        connection.execute(sa.update(tasks).where(tasks.c.task_id == row.task_id).values(
            state=state, senders=None if "senders" not in published else json.dumps(published["senders"]),
            survivors=None if "survivors" not in published else json.dumps(published["survivors"])))
    with op.batch_alter_table("sharing_tasks") as batch:
        batch.alter_column("state", existing_type=sa.String(16), nullable=False)
        for column in ("status", "round", "round_name", "published"):
            batch.drop_column(column)
