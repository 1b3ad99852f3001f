"""The database names its role (privagg_database's one row), so every command refuses another party's database
(storage.check_role): an older release let `privagg tokens issue --db` write the collector's tables into the
analyzer's database, and served one role on another's.

Revision ID: a0007
Revises: a0006
"""

from alembic import op

from privagg.service.storage import record_role

revision = "a0007"
down_revision = "a0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    record_role("analyzer")


def downgrade() -> None:
    op.drop_table("privagg_database")
