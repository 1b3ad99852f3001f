"""Opened messages kept for candidates given later: a huge-domain frequency task's applied messages (the shuffled
multiset the analyzer saw), so that public candidates added after they arrived are answered exactly.

Revision ID: a0005
Revises: a0004
"""

import sqlalchemy as sa
from alembic import op

revision = "a0005"
down_revision = "a0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "opened_messages",
        sa.Column("task_id", sa.String(32), primary_key=True),
        sa.Column("batch_id", sa.String(32), primary_key=True),
        sa.Column("part", sa.Integer, primary_key=True),
        sa.Column("records", sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("opened_messages")
