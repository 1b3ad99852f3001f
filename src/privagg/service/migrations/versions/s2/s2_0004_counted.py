"""S2 keeps the R2 and |R_j| it opened the helpers' sums with as round 3 closed (their SHA-256), and holds the
hand-over to them: the sums are sealed binding them, so an S1 that named other ones to have some sum open could
otherwise hand over the true ones (docs/privacy.md, "A helper's lists"). A task of an older release has none (NULL):
its hand-over is held to nothing; but the sums its helpers sealed with an older SDK bind neither, so they no longer
open, and an older SDK refuses the round-3 inbox that shows R2: let TSS tasks in flight finish before upgrading S2,
S1 and the devices.

Revision ID: s2_0004
Revises: s2_0003
"""

import sqlalchemy as sa
from alembic import op

revision = "s2_0004"
down_revision = "s2_0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("s2_tasks") as batch:
        batch.add_column(sa.Column("counted", sa.LargeBinary(32)))


def downgrade() -> None:
    with op.batch_alter_table("s2_tasks") as batch:
        batch.drop_column("counted")
