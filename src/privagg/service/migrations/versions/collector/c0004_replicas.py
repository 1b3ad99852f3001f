"""Collector replicas: each task's last report arrival in the database, so every collector process times the quiet
period of a local task's batch alike (it was in one process's memory).

Revision ID: c0004
Revises: c0003
"""

import sqlalchemy as sa
from alembic import op

revision = "c0004"
down_revision = "c0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("collector_tasks", sa.Column("last_arrival", sa.Float))


def downgrade() -> None:
    with op.batch_alter_table("collector_tasks") as batch:
        batch.drop_column("last_arrival")
