"""The `db_url` fixture gives a working, empty database on each backend."""

import sqlalchemy as sa


def test_a_row_round_trips(db_url):
    engine = sa.create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)"))
            conn.execute(sa.text("INSERT INTO items (id, name) VALUES (:id, :name)"), {"id": 1, "name": "first"})
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT id, name FROM items")).all() == [(1, "first")]
    finally:
        engine.dispose()
