"""The privacy budget across tasks (issue 49): a budget per population and the charge of every task created
(service/ledger.py).

Revision ID: a0008
Revises: a0007
"""

from alembic import op

from privagg.service.ledger import create_tables_migration

revision = "a0008"
down_revision = "a0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_tables_migration(op)


def downgrade() -> None:
    op.drop_table("budget_charges")
    op.drop_table("budgets")
