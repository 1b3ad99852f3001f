"""The database names its role (privagg_database's one row), so every command refuses another party's database
(storage.check_role): an older release let `privagg tokens issue --db` write the collector's tables into the
analyzer's database, and served one role on another's.

Revision ID: s1_0002
Revises: s1_0001
"""

from alembic import op

from privagg.service.storage import record_role

revision = "s1_0002"
down_revision = "s1_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    record_role("s1")


def downgrade() -> None:
    op.drop_table("privagg_database")
