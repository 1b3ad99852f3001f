"""TSS's S2, first schema: its tasks with their keys, S1's relay token (hashed), the hand-over and the release.

Revision ID: s2_0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "s2_0001"
down_revision = None
branch_labels = ("s2",)
depends_on = None


def upgrade() -> None:
    op.create_table("s2_tasks", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("task", sa.Text, nullable=False),
                    sa.Column("private_key", sa.LargeBinary, nullable=False),
                    sa.Column("relay_hash", sa.LargeBinary(32), nullable=False),
                    sa.Column("state", sa.String(16), nullable=False), sa.Column("handover", sa.LargeBinary),
                    sa.Column("handover_digest", sa.LargeBinary(32)), sa.Column("outcome", sa.Text))


def downgrade() -> None:
    op.drop_table("s2_tasks")
