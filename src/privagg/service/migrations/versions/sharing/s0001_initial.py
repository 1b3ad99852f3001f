"""The sharing server's first schema: tasks and their rounds, tokens, the roster, relayed shares, round messages.

Revision ID: s0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "s0001"
down_revision = None
branch_labels = ("sharing",)
depends_on = None


def upgrade() -> None:
    op.create_table("sharing_tasks", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("task", sa.Text, nullable=False), sa.Column("state", sa.String(16), nullable=False),
                    sa.Column("deadline", sa.Float), sa.Column("senders", sa.Text), sa.Column("survivors", sa.Text),
                    sa.Column("outcome", sa.Text))
    op.create_table("sharing_tokens", sa.Column("token_hash", sa.LargeBinary(32), primary_key=True),
                    sa.Column("task_id", sa.String(32), nullable=False), sa.Column("user", sa.Integer))
    op.create_table("roster", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("user", sa.Integer, primary_key=True),
                    sa.Column("public_key", sa.LargeBinary, nullable=False),
                    sa.Column("secret_hash", sa.LargeBinary(32), nullable=False))
    op.create_table("relayed_shares", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("sender", sa.Integer, primary_key=True),
                    sa.Column("recipient", sa.Integer, primary_key=True),
                    sa.Column("sealed", sa.LargeBinary, nullable=False), sqlite_with_rowid=False)
    op.create_index("relayed_to", "relayed_shares", ["task_id", "recipient", "sender"])
    op.create_table("round_messages", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("round", sa.Integer, primary_key=True), sa.Column("user", sa.Integer, primary_key=True),
                    sa.Column("message", sa.LargeBinary, nullable=False))


def downgrade() -> None:
    for table in ("round_messages", "relayed_shares", "roster", "sharing_tokens", "sharing_tasks"):
        op.drop_table(table)
