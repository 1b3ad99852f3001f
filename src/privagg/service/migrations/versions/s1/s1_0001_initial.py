"""TSS's S1, first schema: tasks and their rounds, tokens, the roster, round messages, relayed shares.

Revision ID: s1_0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "s1_0001"
down_revision = None
branch_labels = ("s1",)
depends_on = None


def upgrade() -> None:
    op.create_table("s1_tasks", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("task", sa.Text, nullable=False), sa.Column("state", sa.String(16), nullable=False),
                    sa.Column("deadline", sa.Float), sa.Column("second_url", sa.Text, nullable=False),
                    sa.Column("relay_token", sa.Text, nullable=False), sa.Column("election", sa.Text),
                    sa.Column("survivors", sa.Text), sa.Column("reporters", sa.Text), sa.Column("recovery", sa.Text),
                    sa.Column("outcome", sa.Text))
    op.create_table("s1_tokens", sa.Column("token_hash", sa.LargeBinary(32), primary_key=True),
                    sa.Column("task_id", sa.String(32), nullable=False), sa.Column("user", sa.Integer))
    op.create_table("s1_roster", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("user", sa.Integer, primary_key=True),
                    sa.Column("public_key", sa.LargeBinary, nullable=False),
                    sa.Column("secret_hash", sa.LargeBinary(32), nullable=False))
    op.create_table("s1_messages", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("round", sa.Integer, primary_key=True), sa.Column("user", sa.Integer, primary_key=True),
                    sa.Column("message", sa.LargeBinary, nullable=False))
    op.create_table("s1_shares", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("sender", sa.Integer, primary_key=True),
                    sa.Column("recipient", sa.Integer, primary_key=True),
                    sa.Column("sealed", sa.LargeBinary, nullable=False), sqlite_with_rowid=False)


def downgrade() -> None:
    for table in ("s1_shares", "s1_messages", "s1_roster", "s1_tokens", "s1_tasks"):
        op.drop_table(table)
