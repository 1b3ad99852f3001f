"""The privacy budget across tasks (issue 49): a budget per population and the charge of every task created
(service/ledger.py).

Revision ID: s1_0006
Revises: s1_0003
"""

from alembic import op

from privagg.service.ledger import create_tables_migration

revision = "s1_0006"
down_revision = "s1_0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_tables_migration(op)


def downgrade() -> None:
    op.drop_table("budget_charges")
    op.drop_table("budgets")
