"""S2's private keys sealed under a key-encryption key (privagg.service.keys.seal_raw_keys), the raw column dropped.

A database with tasks cannot be moved without the KEK: the upgrade then stops, naming it, and changes nothing.

Revision ID: s2_0002
Revises: s2_0001
"""

from alembic import context

revision = "s2_0002"
down_revision = "s2_0001"
branch_labels = None
depends_on = None

IRREVERSIBLE = "it would write the private keys raw again"  # read by schema_versions.downgrade


def upgrade() -> None:
    from privagg.service.keys import seal_raw_keys

    seal_raw_keys("s2_tasks", context.config.attributes.get("kek"), revision)


def downgrade() -> None:
    raise NotImplementedError(f"{revision} does not go back: {IRREVERSIBLE}")
