"""The tasks an older release made before the privacy budget ledger (a0008, s0006, s1_0006) charged to the default
population as their creation would have been (service/ledger.py, charge_older_tasks): a budget then counts them.

Revision ID: s1_0007
Revises: s1_0004
"""

from alembic import op

from privagg.service.ledger import charge_older_tasks

revision = "s1_0007"
down_revision = "s1_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    charge_older_tasks(op.get_bind(), "s1")


def downgrade() -> None:
    """The charges stay: each is a task's true spend (the ledger's own downgrade drops them with it)."""
