"""S2 keeps the one election it attested for a task (its SHA-256) and opens the helpers' sums and takes the hand-over
only under it: an S1 that had two elections attested, or showed S2 another as round 3 closed, could choose which
helpers back an item's count (docs/privacy.md, "A helper's lists"). A task of an older release has none (NULL): S2
opens nothing for it (let TSS tasks in flight finish before upgrading, as s2_0004 says).

Revision ID: s2_0005
Revises: s2_0004
"""

import sqlalchemy as sa
from alembic import op

revision = "s2_0005"
down_revision = "s2_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("s2_tasks") as batch:
        batch.add_column(sa.Column("elected", sa.LargeBinary(32)))


def downgrade() -> None:
    with op.batch_alter_table("s2_tasks") as batch:
        batch.drop_column("elected")
