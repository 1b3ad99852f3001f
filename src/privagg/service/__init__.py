"""The parties as network services (docs/deployment.md), by topology over a common core.

The core (this package's modules): ``web`` (the FastAPI app, limits, logging), ``storage`` (tables, connection,
Alembic ``migrations/``), ``keys`` (the key-encryption key), ``config``, ``tasks`` (a task, sealing and opening
messages), ``calls`` (what every client shares), ``local`` (a party as a child process), and the multi-round
machinery: ``round_tasks``, ``roster``, ``rounds`` (the generic round driver), ``round_client`` (a user's rounds)
and ``round_demo``. Three topologies over it, which import the core and not each other:

- ``shuffle``: the shuffle model's collector (the shuffler) and analyzer, its client SDK, load generator and demo;
- ``sharing``: the DPDS/DPDG sharing server, its client and demo;
- ``two_servers``: TSS's S1 and S2, their client and demo.
"""
