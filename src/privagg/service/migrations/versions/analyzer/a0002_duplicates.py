"""The analyzer trusts no batch: repeated encapsulations dropped and counted, a local task's applied ones kept.

Revision ID: a0002
Revises: a0001
"""

import sqlalchemy as sa
from alembic import op

revision = "a0002"
down_revision = "a0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("aggregates", sa.Column("duplicates", sa.Integer, nullable=False, server_default="0"))
    op.create_table("applied_encapsulations", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("digest", sa.LargeBinary(32), primary_key=True), sqlite_with_rowid=False)


def downgrade() -> None:
    op.drop_table("applied_encapsulations")
    op.drop_column("aggregates", "duplicates")
