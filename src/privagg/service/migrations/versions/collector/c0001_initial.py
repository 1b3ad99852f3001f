"""The collector's first schema: tasks, tokens, reports, batches.

Revision ID: c0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "c0001"
down_revision = None
branch_labels = ("collector",)
depends_on = None


def upgrade() -> None:
    op.create_table("collector_tasks", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("task", sa.Text, nullable=False))
    op.create_table("tokens", sa.Column("token_hash", sa.LargeBinary(32), primary_key=True),
                    sa.Column("task_id", sa.String(32), nullable=False), sa.Column("report_id", sa.String(32)),
                    sa.UniqueConstraint("task_id", "report_id", name="one_report_per_id"))
    op.create_table("reports", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("report_id", sa.String(32), primary_key=True),
                    sa.Column("ciphertexts", sa.LargeBinary, nullable=False), sa.Column("batch_id", sa.String(32)))
    op.create_index("ix_reports_batch_id", "reports", ["batch_id"])
    op.create_table("batches", sa.Column("batch_id", sa.String(32), primary_key=True),
                    sa.Column("task_id", sa.String(32), nullable=False),
                    sa.Column("reports", sa.Integer, nullable=False), sa.Column("messages", sa.Integer, nullable=False),
                    sa.Column("acknowledged", sa.Boolean, nullable=False))
    op.create_index("ix_batches_task_id", "batches", ["task_id"])


def downgrade() -> None:
    for table in ("batches", "reports", "tokens", "collector_tasks"):
        op.drop_table(table)
