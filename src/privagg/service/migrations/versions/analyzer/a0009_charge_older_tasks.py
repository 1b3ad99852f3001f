"""The tasks an older release made before the privacy budget ledger (a0008, s0006, s1_0006) charged to the default
population as their creation would have been (service/ledger.py, charge_older_tasks): a budget then counts them.

Revision ID: a0009
Revises: a0008
"""

from alembic import op

from privagg.service.ledger import charge_older_tasks

revision = "a0009"
down_revision = "a0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    charge_older_tasks(op.get_bind(), "analyzer")


def downgrade() -> None:
    """The charges stay: each is a task's true spend (the ledger's own downgrade drops them with it)."""
