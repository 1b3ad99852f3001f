"""Alembic's entry point for both parties: the caller (:mod:`privagg.service.schema_versions`) passes the
open connection and the role; each role keeps its own version table."""

from alembic import context

from privagg.service.storage import metadata

config = context.config
role = config.attributes["role"]
context.configure(connection=config.attributes["connection"], target_metadata=metadata[role],
                  version_table=f"alembic_version_{role}")
with context.begin_transaction():
    context.run_migrations()
