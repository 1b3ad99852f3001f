"""Identities (issue 46): a task's organisation key, its signature of the task and the roster it signed; each
enrolled user's identity key and his token's binding; each stored message's signature by its sender
(service/rounds.py, docs/privacy.md, "Dishonest parties").

A task enrolling or running at the upgrade has no organisation, and its users enrolled no identity: it cannot go on
(its devices' SDK pins an organisation key and refuses an unsigned task; a server that ran it unsigned is what the
signatures close), so the upgrade fails it, saying why; it keeps its round and what was published. Finish tasks, or
create them again, around the upgrade.

Revision ID: s1_0004
Revises: s1_0006 (the budget's, merged first; this revision was numbered before it)
"""

from privagg.service.storage import add_identities, drop_identities

revision = "s1_0004"
down_revision = "s1_0006"
branch_labels = None
depends_on = None

TABLES = ("s1_tasks", "s1_roster", "s1_messages", "s1_relayed")  # tasks, roster, messages, relayed messages


def upgrade() -> None:
    add_identities(TABLES, revision)


def downgrade() -> None:
    drop_identities(TABLES)
