"""The database names its role (privagg_database's one row), so every command refuses another party's database
(storage.check_role): an older release let `privagg tokens issue --db` write the collector's tables into the
analyzer's database, and served one role on another's.

Revision ID: c0006
Revises: c0005
"""

from alembic import op

from privagg.service.storage import record_role

revision = "c0006"
down_revision = "c0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    record_role("collector")


def downgrade() -> None:
    op.drop_table("privagg_database")
