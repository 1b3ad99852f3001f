"""Each task's messages counted and malformed beside its aggregate, so that the task list says, without reading
every aggregate, whether a release is private (a release with messages lost below ceil(G n) whole reports is not,
and the list called it "released"): read once from each stored aggregate.

Revision ID: a0010
Revises: a0009
"""

import sqlalchemy as sa
from alembic import op

revision = "a0010"
down_revision = "a0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from privagg.service.shuffle.aggregate_codec import decode_aggregate

    op.add_column("aggregates", sa.Column("messages", sa.BigInteger, nullable=False, server_default="0"))
    op.add_column("aggregates", sa.Column("malformed", sa.BigInteger, nullable=False, server_default="0"))
    aggregates = sa.table("aggregates", sa.column("task_id", sa.String), sa.column("aggregate", sa.LargeBinary),
                          sa.column("messages", sa.BigInteger), sa.column("malformed", sa.BigInteger))
    connection = op.get_bind()
    for task_id in connection.execute(sa.select(aggregates.c.task_id)).scalars().all():  # one aggregate at a time
        agg = decode_aggregate(connection.execute(sa.select(aggregates.c.aggregate).where(
            aggregates.c.task_id == task_id)).scalar_one())
        connection.execute(sa.update(aggregates).where(aggregates.c.task_id == task_id).values(
            messages=int(agg.messages), malformed=int(agg.malformed)))


def downgrade() -> None:
    with op.batch_alter_table("aggregates") as batch:
        batch.drop_column("malformed")
        batch.drop_column("messages")
