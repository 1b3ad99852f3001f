"""The tokens' unique (task id, report id) holds spent tokens only (a partial unique index, the same rule: NULLs were
never equal): spending a token inserts its entry and no longer deletes an unspent one, one b-tree change fewer a
report at a random place (docs/benchmarks.md, part 10).

Revision ID: c0008
Revises: c0007
"""

import sqlalchemy as sa
from alembic import op

revision = "c0008"
down_revision = "c0007"
branch_labels = None
depends_on = None

SPENT = sa.text("report_id IS NOT NULL")


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_constraint("one_report_per_id", type_="unique")
    op.create_index("one_report_per_id", "tokens", ["task_id", "report_id"], unique=True, sqlite_where=SPENT,
                    postgresql_where=SPENT)


def downgrade() -> None:
    op.drop_index("one_report_per_id", "tokens")
    with op.batch_alter_table("tokens") as batch:
        batch.create_unique_constraint("one_report_per_id", ["task_id", "report_id"])
