"""Tasks can be closed: no report is taken after, and a shuffle task's one batch may then hold fewer than n.

Revision ID: c0002
Revises: c0001
"""

import sqlalchemy as sa
from alembic import op

revision = "c0002"
down_revision = "c0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("collector_tasks", sa.Column("closed", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    op.drop_column("collector_tasks", "closed")
