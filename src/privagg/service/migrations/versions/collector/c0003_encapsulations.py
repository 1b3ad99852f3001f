"""Replays: the digest of every accepted message's HPKE encapsulated key, so none is accepted twice in a task.

Revision ID: c0003
Revises: c0002
"""

import sqlalchemy as sa
from alembic import op

revision = "c0003"
down_revision = "c0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("encapsulations", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("digest", sa.LargeBinary(32), primary_key=True), sqlite_with_rowid=False)


def downgrade() -> None:
    op.drop_table("encapsulations")
