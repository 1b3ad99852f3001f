"""State you can keep for years: private keys sealed under a key-encryption key, aggregates without pickle.

Each task's raw HPKE private key moves into ``sealed_key`` (AES-256-GCM under the KEK the analyzer is started
with: privagg.service.keys.seal_raw_keys) with the id of that KEK, beside the task's HPKE key id and creation
time; the raw column is dropped. Each aggregate, pickled until now, is read once more (rows this analyzer wrote
itself) and stored in the versioned .npz form (privagg.service.shuffle.aggregate_codec) read without pickle from now on.
A database with tasks cannot be moved without the KEK: the upgrade then stops, naming it, and changes nothing.

Revision ID: a0003
Revises: a0002
"""

import json
import pickle
import time

import sqlalchemy as sa
from alembic import context, op

revision = "a0003"
down_revision = "a0002"
branch_labels = None
depends_on = None

IRREVERSIBLE = "it would write the private keys raw again"  # read by schema_versions.downgrade


def upgrade() -> None:
    from privagg.service.shuffle.aggregate_codec import encode_aggregate
    from privagg.service.keys import seal_raw_keys

    seal_raw_keys("analyzer_tasks", context.config.attributes.get("kek"), revision)
    connection = op.get_bind()
    with op.batch_alter_table("analyzer_tasks") as batch:
        batch.add_column(sa.Column("key_id", sa.Integer))
        batch.add_column(sa.Column("created", sa.Float))
    tasks = sa.table("analyzer_tasks", sa.column("task_id", sa.String), sa.column("task", sa.Text),
                     sa.column("key_id", sa.Integer), sa.column("created", sa.Float))
    rows, now = connection.execute(sa.select(tasks.c.task_id, tasks.c.task)).all(), time.time()
    for order, row in enumerate(rows):  # their order of creation is not known: they keep their key ids
        connection.execute(sa.update(tasks).where(tasks.c.task_id == row.task_id).values(
            key_id=json.loads(row.task)["key_id"], created=now - len(rows) + order))
    with op.batch_alter_table("analyzer_tasks") as batch:
        batch.alter_column("key_id", nullable=False)
        batch.alter_column("created", nullable=False)
    aggregates = sa.table("aggregates", sa.column("task_id", sa.String), sa.column("aggregate", sa.LargeBinary))
    for row in connection.execute(sa.select(aggregates)).all():
        connection.execute(sa.update(aggregates).where(aggregates.c.task_id == row.task_id).values(
            aggregate=encode_aggregate(pickle.loads(row.aggregate))))  # noqa: S301 (our own rows, once)


def downgrade() -> None:
    raise NotImplementedError(f"{revision} does not go back: {IRREVERSIBLE}")
