"""Public candidates at task creation: the items a frequency task over a huge domain answers (JSON list).

Revision ID: a0004
Revises: a0003
"""

import sqlalchemy as sa
from alembic import op

revision = "a0004"
down_revision = "a0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("analyzer_tasks", sa.Column("candidates", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("analyzer_tasks") as batch:
        batch.drop_column("candidates")
