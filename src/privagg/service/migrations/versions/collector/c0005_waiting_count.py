"""Each task's count of reports waiting for a batch, kept by the writer with the reports it stores: the batch
loop reads it every second instead of counting the waiting reports (a scan of every one, 10^8 and more in a
large task).

Revision ID: c0005
Revises: c0004
"""

import sqlalchemy as sa
from alembic import op

revision = "c0005"
down_revision = "c0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("collector_tasks", sa.Column("waiting", sa.BigInteger, nullable=False, server_default="0"))
    op.execute("UPDATE collector_tasks SET waiting = (SELECT count(*) FROM reports WHERE reports.task_id = "
               "collector_tasks.task_id AND reports.batch_id IS NULL)")


def downgrade() -> None:
    with op.batch_alter_table("collector_tasks") as batch:
        batch.drop_column("waiting")
