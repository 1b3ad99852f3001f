"""A partitioned batch's progress: each partition's aggregate as it is done, so that an analyzer stopped part way
through a batch of hours goes on from the partitions it has not aggregated.

Revision ID: a0006
Revises: a0005
"""

import sqlalchemy as sa
from alembic import op

revision = "a0006"
down_revision = "a0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "partition_progress",
        sa.Column("task_id", sa.String(32), primary_key=True),
        sa.Column("batch_id", sa.String(32), primary_key=True),
        sa.Column("part", sa.Integer, primary_key=True),
        sa.Column("basis", sa.LargeBinary(32), nullable=False),
        sa.Column("aggregate", sa.LargeBinary, nullable=False),
        sa.Column("opened", sa.BigInteger, nullable=False),
        sa.Column("unopened", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("partition_progress")
