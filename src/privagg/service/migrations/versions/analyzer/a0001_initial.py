"""The analyzer's first schema: tasks with their keys, aggregates, applied batches.

Revision ID: a0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "a0001"
down_revision = None
branch_labels = ("analyzer",)
depends_on = None


def upgrade() -> None:
    op.create_table("analyzer_tasks", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("task", sa.Text, nullable=False),
                    sa.Column("private_key", sa.LargeBinary, nullable=False))
    op.create_table("aggregates", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("aggregate", sa.LargeBinary, nullable=False),
                    sa.Column("batches", sa.Integer, nullable=False), sa.Column("reports", sa.Integer, nullable=False),
                    sa.Column("unopened", sa.Integer, nullable=False))
    op.create_table("applied_batches", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("batch_id", sa.String(32), primary_key=True))


def downgrade() -> None:
    for table in ("applied_batches", "aggregates", "analyzer_tasks"):
        op.drop_table(table)
