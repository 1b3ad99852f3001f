"""The encapsulations' digests kept under a number for each task (``task_numbers``) instead of its 32-character id:
the writer inserts about 7 of these rows a report at random places, and a row of about half the size halves the
table's pages, which each group of reports dirties and writes to the WAL (docs/benchmarks.md, part 10).

Revision ID: c0007
Revises: c0006
"""

import sqlalchemy as sa
from alembic import op

revision = "c0007"
down_revision = "c0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("task_numbers", sa.Column("number", sa.Integer, primary_key=True),
                    sa.Column("task_id", sa.String(32), nullable=False),
                    sa.UniqueConstraint("task_id", name="one_number_per_task"))
    op.execute("INSERT INTO task_numbers (task_id) SELECT task_id FROM collector_tasks UNION "
               "SELECT task_id FROM encapsulations ORDER BY 1")
    op.create_table("encapsulations_numbered", sa.Column("task", sa.Integer, primary_key=True, autoincrement=False),
                    sa.Column("digest", sa.LargeBinary(32), primary_key=True), sqlite_with_rowid=False)
    op.execute("INSERT INTO encapsulations_numbered (task, digest) SELECT n.number, e.digest FROM encapsulations e "
               "JOIN task_numbers n ON n.task_id = e.task_id ORDER BY n.number, e.digest")
    op.drop_table("encapsulations")
    op.rename_table("encapsulations_numbered", "encapsulations")


def downgrade() -> None:
    op.create_table("encapsulations_by_id", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("digest", sa.LargeBinary(32), primary_key=True), sqlite_with_rowid=False)
    op.execute("INSERT INTO encapsulations_by_id (task_id, digest) SELECT n.task_id, e.digest FROM encapsulations e "
               "JOIN task_numbers n ON n.number = e.task")
    op.drop_table("encapsulations")
    op.rename_table("encapsulations_by_id", "encapsulations")
    op.drop_table("task_numbers")
