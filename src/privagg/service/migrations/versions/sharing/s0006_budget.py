"""The privacy budget across tasks (issue 49): a budget per population and the charge of every task created
(service/ledger.py).

Revision ID: s0006
Revises: s0003
"""

from alembic import op

from privagg.service.ledger import LEDGER_TABLES, create_tables_migration, drop_tables_migration

revision = "s0006"
down_revision = "s0003"
branch_labels = None
depends_on = None

DROPS_LEDGER = LEDGER_TABLES  # read by schema_versions.downgrade: refused over a ledger with rows, unless told


def upgrade() -> None:
    create_tables_migration(op)


def downgrade() -> None:
    drop_tables_migration(op)
