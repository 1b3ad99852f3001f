"""Rolling back a release: ``privagg db downgrade`` takes a database back to an older release's schema version, and
every entry point refuses a database at a version this release does not know (a newer release's) in one line saying
what to do, instead of a traceback or the advice to run ``db upgrade``.

Each role's downgrades are run one at a time from the newest version to the oldest one reachable, and each result is
compared with a fresh database made at that version (tables, columns with their types and nullability, primary keys,
indexes, unique constraints, read by ``sqlalchemy.inspect``): a downgrade that forgets an index or a column differs.
The rows the downgrades claim to carry back (c0007's replay records by task id, s0003's and s1_0003's relayed rows)
are read back after the downgrade and again after the upgrade. The PostgreSQL halves are marked slow (conftest.py).
"""

import json
import logging
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from privagg.cli import app
from privagg.protocols.registry import calibrate
from privagg.service import storage
from privagg.service.schema_versions import chain
from service_deployment import database_at

LOWEST = {"collector": "c0001", "analyzer": "a0003", "sharing": "s0001", "s1": "s1_0001", "s2": "s2_0002"}  # reachable
HEAD = {role: chain(role)[0] for role in storage.ROLES}




@pytest.fixture
def cli(monkeypatch) -> Callable:
    """privagg's command line in this process (CliRunner); the privagg logger, which ``privagg serve`` configures, is
    put back after the test."""
    logger = logging.getLogger("privagg")
    for name in ("handlers", "level", "propagate"):
        monkeypatch.setattr(logger, name, getattr(logger, name)[:] if name == "handlers" else getattr(logger, name))
    return lambda *args: CliRunner().invoke(app, list(args))


def schema(url: str) -> dict:
    """Every table's columns (type, nullable), primary key, indexes and unique constraints."""
    engine = sa.create_engine(url)
    try:
        inspector = sa.inspect(engine)
        return {table: {
            "columns": {c["name"]: (str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)},
            "primary key": inspector.get_pk_constraint(table)["constrained_columns"],
            "indexes": sorted((i["name"], i["column_names"], bool(i["unique"]), sorted(
                (k, str(v)) for k, v in i.get("dialect_options", {}).items()))
                              for i in inspector.get_indexes(table)),
            "unique": sorted((u["name"], u["column_names"]) for u in inspector.get_unique_constraints(table)),
        } for table in inspector.get_table_names()}
    finally:
        engine.dispose()


def contents(url: str) -> dict:
    """The schema and every table's rows: what "the database is unchanged" compares."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            rows = {table: sorted(map(tuple, c.execute(sa.select(sa.Table(table, sa.MetaData(), autoload_with=c)))))
                    for table in sa.inspect(c).get_table_names()}
    finally:
        engine.dispose()
    return {"schema": schema(url), "rows": rows}


def insert(url: str, rows: dict[str, list[dict]]) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as c:
            for table, values in rows.items():
                c.execute(sa.insert(sa.Table(table, sa.MetaData(), autoload_with=c)), values)
    finally:
        engine.dispose()


def select(url: str, query: str) -> list[tuple]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            return sorted(map(tuple, c.execute(sa.text(query))))
    finally:
        engine.dispose()


def task_json(role: str, task_id: str) -> str:
    """A task's stored JSON (sharing or s1), as migrations s0007 and s1_0007 read it to charge it to the ledger."""
    from privagg.service.round_tasks import SharingTask, TSSTask

    options = {"delta": 1e-3, "n_users": 40, "domain_size": 4, "min_count_fraction": 0.1}
    if role == "sharing":
        return json.dumps(SharingTask(task_id, calibrate("dpds", epsilon=1.0, **options), 60.0, 30).to_dict())
    parameters = calibrate("tss", epsilon=1.0, report_fraction=0.5, **options)
    return json.dumps(TSSTask(task_id, parameters, 60.0, 30, "cd" * 16, bytes(32)).to_dict())


def at_newer_version(url: str, role: str) -> str:
    """``url``'s ``role`` database as a newer release would leave it: a table of its own, and its version."""
    newer = f"{HEAD[role]}_next"
    engine = sa.create_engine(url)
    try:
        with engine.begin() as c:
            c.execute(sa.text("CREATE TABLE next_release (x INTEGER)"))
            c.execute(sa.text(f"UPDATE alembic_version_{role} SET version_num = '{newer}'"))
    finally:
        engine.dispose()
    return newer


def error_line(result) -> str:
    """The command's one error line (exit 2; a service also logs its configuration before it fails)."""
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


# ---- every downgrade gives its version's schema ------------------------------------------------------------------
@pytest.mark.parametrize("role", storage.ROLES)
def test_each_downgrade_gives_its_versions_schema_and_the_upgrade_the_newest(role, fresh):
    versions = chain(role)
    reachable = versions[:versions.index(LOWEST[role]) + 1]
    url = fresh()
    assert storage.upgrade_database(url, role, create=True) == (None, HEAD[role])
    for newer, older in zip(reachable, reachable[1:]):
        assert storage.downgrade_database(url, role, older) == (newer, older)
        made = fresh()
        database_at(made, role, older).dispose()
        assert schema(url) == schema(made), f"{role} {newer} -> {older}"
    assert storage.upgrade_database(url, role) == (LOWEST[role], HEAD[role])
    made = fresh()
    storage.upgrade_database(made, role, create=True)
    assert schema(url) == schema(made)


# ---- the rows a downgrade carries back -----------------------------------------------------------------------------
def test_the_collectors_replay_records_and_tokens_go_back_by_task_id_and_up_again(fresh):
    url = fresh()
    storage.upgrade_database(url, "collector", create=True)
    tasks = {"a" * 32: 1, "b" * 32: 2, "c" * 32: 3}  # c: records of a task with no row (c0007 numbers it too)
    kept = [(task, bytes([i, number]) * 16) for task, number in tasks.items() for i in range(3)]
    kept.append(("b" * 32, kept[0][1]))  # another task's message with the same digest: not a replay
    spent = [(bytes([i]) * 32, "a" * 32, f"{i:032x}" if i % 2 else None) for i in range(4)]
    insert(url, {"collector_tasks": [{"task_id": t, "task": "{}"} for t in ("a" * 32, "b" * 32)],
                 "task_numbers": [{"number": n, "task_id": t} for t, n in tasks.items()],
                 "encapsulations": [{"task": tasks[t], "digest": d} for t, d in kept],
                 "tokens": [{"token_hash": h, "task_id": t, "report_id": r} for h, t, r in spent]})
    assert storage.downgrade_database(url, "collector", "c0006") == ("c0008", "c0006")
    assert select(url, "SELECT task_id, digest FROM encapsulations") == sorted(kept)
    assert select(url, "SELECT token_hash, task_id, report_id FROM tokens") == sorted(spent)
    storage.upgrade_database(url, "collector")
    assert select(url, "SELECT n.task_id, e.digest FROM encapsulations e JOIN task_numbers n ON n.number = e.task") \
        == sorted(kept)
    assert select(url, "SELECT token_hash, task_id, report_id FROM tokens") == sorted(spent)


def test_the_sharing_servers_relayed_messages_and_tasks_go_back_and_up_again(fresh):
    url = fresh()
    storage.upgrade_database(url, "sharing", create=True)
    released = {"senders": [0, 1, 2], "survivors": [0, 1]}
    insert(url, {"sharing_tasks": [
        {"task_id": "a" * 32, "task": task_json("sharing", "a" * 32), "status": "released", "round": 3,
         "round_name": "reveal",
         "deadline": None, "published": json.dumps(released), "outcome": '{"estimates": []}'},
        {"task_id": "b" * 32, "task": task_json("sharing", "b" * 32), "status": "running", "round": 2,
         "round_name": "masked_sum",
         "deadline": 5.0, "published": json.dumps({"senders": [1]}), "outcome": None}],
        "relayed_messages": [{"task_id": t, "round": r, "sender": s, "recipient": p, "sealed": bytes([s, p, r]),
                              "signature": b"sig"} for t, r, s, p in (("a" * 32, 1, 0, 1), ("a" * 32, 1, 1, 0),
                                                                       ("b" * 32, 1, 2, 1), ("b" * 32, 2, 1, 2))]})
    round1 = [(t, s, p, bytes([s, p, 1])) for t, s, p in (("a" * 32, 0, 1), ("a" * 32, 1, 0), ("b" * 32, 2, 1))]
    assert storage.downgrade_database(url, "sharing", "s0002") == ("s0007", "s0002")
    # the older schema keeps round 1's relayed messages (its backups), the one round it relayed
    assert select(url, "SELECT task_id, sender, recipient, sealed FROM relayed_shares") == round1
    assert select(url, "SELECT task_id, state, senders, survivors, outcome FROM sharing_tasks") == [
        ("a" * 32, "released", "[0, 1, 2]", "[0, 1]", '{"estimates": []}'), ("b" * 32, "round2", "[1]", None, None)]
    storage.upgrade_database(url, "sharing")
    assert select(url, "SELECT task_id, sender, recipient, sealed FROM relayed_messages WHERE round = 1") == round1
    assert select(url, "SELECT count(*) FROM relayed_messages") == [(3,)]
    tasks = select(url, "SELECT task_id, status, round, round_name, published FROM sharing_tasks")
    assert tasks[0] == ("a" * 32, "released", 3, "reveal", json.dumps(released))
    assert tasks[1][1:3] == ("failed", 2)  # s0004 fails a task running at the upgrade (no signed roster)


def test_s1s_relayed_shares_and_tasks_go_back_and_up_again(fresh):
    url = fresh()
    storage.upgrade_database(url, "s1", create=True)
    published = {"election": [1, 2], "survivors": [0, 1, 2], "reporters": {"0": [1]}}
    insert(url, {"s1_tasks": [{"task_id": "a" * 32, "task": task_json("s1", "a" * 32), "status": "handover", "round": 3,
                               "round_name": "sums", "published": json.dumps(published), "second_url": "https://s2",
                               "relay_token": "t"}],
                 "s1_relayed": [{"task_id": "a" * 32, "round": 2, "sender": s, "recipient": p, "sealed": bytes([s, p]),
                                 "signature": b"sig"} for s, p in ((0, 1), (1, 2), (2, 1))]})
    shares = [("a" * 32, s, p, bytes([s, p])) for s, p in ((0, 1), (1, 2), (2, 1))]
    assert storage.downgrade_database(url, "s1", "s1_0002") == ("s1_0007", "s1_0002")
    assert select(url, "SELECT task_id, sender, recipient, sealed FROM s1_shares") == shares
    assert select(url, "SELECT state, election, survivors, reporters, recovery FROM s1_tasks") == [
        ("handover", "[1, 2]", "[0, 1, 2]", '{"0": [1]}', None)]
    storage.upgrade_database(url, "s1")
    assert select(url, "SELECT task_id, sender, recipient, sealed FROM s1_relayed WHERE round = 2") == shares
    assert select(url, "SELECT status, round, round_name, published FROM s1_tasks") == [
        ("handover", 3, "sums", json.dumps(published))]


# ---- what is refused, with the database unchanged ------------------------------------------------------------------
def test_a_newer_releases_database_is_refused_by_every_entry_point_in_one_line(fresh, tmp_path, kek, cli):
    urls = {role: fresh() for role in storage.ROLES}
    for role, url in urls.items():
        storage.upgrade_database(url, role, kek=kek, create=True)
    newer = {role: at_newer_version(url, role) for role, url in urls.items()}
    before = {url: contents(url) for url in urls.values()}

    def refusal(role: str) -> str:
        return (f"db must be {storage.a_role(role)} database at a schema version this release knows (its newest is "
                f"{HEAD[role]}; a newer release's database is run by that release, or first taken back with that "
                f"release's `privagg db downgrade --role {role} --db URL --to {HEAD[role]}`), got version "
                f"{newer[role]}, which this release does not know")

    for role, url in urls.items():
        for options in ({"create": False}, {"create": False, "upgrade": True}, {}):
            with pytest.raises(storage.ParameterError) as refused:
                storage.connect(url, role, kek=kek, **options)
            assert str(refused.value) == refusal(role)
    params = {}
    for protocol, options in (("grr", {"n_users": 100, "domain_size": 4}),
                              ("dpds", {"delta": 1e-3, "n_users": 40, "domain_size": 4, "min_count_fraction": 0.1}),
                              ("tss", {"delta": 1e-3, "n_users": 40, "domain_size": 4, "min_count_fraction": 0.1,
                                       "report_fraction": 0.5})):
        params[protocol] = tmp_path / f"{protocol}.json"
        params[protocol].write_text(json.dumps(calibrate(protocol, epsilon=1.0, **options).to_dict()))
    organisation = str(tmp_path / "organisation.key")
    assert cli("organisation", "keygen", "--output", organisation).exit_code == 0
    tss = ["task", "create", "--params", str(params["tss"]), "--second-url", "http://127.0.0.1:9",
           "--organisation-key", organisation]
    commands = [  # (the command line, the role whose refusal it prints)
        *[(["db", "upgrade", "--role", role, "--db", url], role) for role, url in urls.items()],
        *[(["db", "downgrade", "--role", role, "--db", url, "--to", LOWEST[role]], role) for role, url in urls.items()],
        *[(["serve", role, "--db", url, *(["--analyzer", "http://127.0.0.1:9"] if role == "collector" else [])], role)
          for role, url in urls.items()],
        (["task", "create", "--params", str(params["grr"]), "--db", urls["analyzer"]], "analyzer"),
        (["task", "create", "--params", str(params["dpds"]), "--db", urls["sharing"], "--organisation-key",
          organisation], "sharing"),
        ([*tss, "--db", urls["s1"], "--second-db", fresh()], "s1"),
        ([*tss, "--db", fresh(), "--second-db", urls["s2"]], "s2"),
    ]
    for args, role in commands:
        assert error_line(cli(*args)) == f"error: {refusal(role)}", args
    assert {url: contents(url) for url in urls.values()} == before


def test_a_downgrade_refuses_a_version_it_cannot_reach_leaving_the_database_as_it_was(fresh, kek, cli):
    urls = {role: fresh() for role in ("collector", "analyzer", "s2")}
    for role, url in urls.items():
        storage.upgrade_database(url, role, kek=kek, create=True)
    insert(urls["analyzer"], {"analyzer_tasks": [{"task_id": "a" * 32, "task": "{}", "key_id": 1, "created": 1.0,
                                                  "sealed_key": b"sealed", "kek_id": kek.kek_id}]})
    before = {url: contents(url) for url in urls.values()}
    collector = "oldest first: " + ", ".join(f"c000{i}" for i in range(1, 9))
    cases = [  # (role, --to, the error after "to must be ")
        ("collector", "a0002", f"one of the collector schema versions of this release ({collector}), got a0002"),
        ("collector", "base", f"one of the collector schema versions of this release ({collector}), got base"),
        ("collector", "c0008", f"a collector schema version older than the database's, c0008 ({collector}), got c0008"),
        ("analyzer", "a0002", "a0003 or a newer analyzer schema version (migration a0003 does not go back: it would "
                              "write the private keys raw again; the database was left at a0010), got a0002"),
        ("analyzer", "a0001", "a0003 or a newer analyzer schema version (migration a0003 does not go back: it would "
                              "write the private keys raw again; the database was left at a0010), got a0001"),
        ("s2", "s2_0001", "s2_0002 or a newer s2 schema version (migration s2_0002 does not go back: it would write "
                          "the private keys raw again; the database was left at s2_0005), got s2_0001"),
    ]
    for role, to, error in cases:
        line = error_line(cli("db", "downgrade", "--role", role, "--db", urls[role], "--to", to))
        assert line == f"error: to must be {error}", line
    assert {url: contents(url) for url in urls.values()} == before
    assert error_line(cli("db", "downgrade", "--role", "analyzer", "--db", urls["collector"], "--to", "a0003")) == \
        f"error: db must be an analyzer database, got {urls['collector']}, a collector database"
    done = cli("db", "downgrade", "--role", "analyzer", "--db", urls["analyzer"], "--to", "a0003")
    assert (done.exit_code, done.output) == (0, f"the analyzer database {urls['analyzer']}: downgraded from version "
                                                f"a0010 to schema version a0003\n")
    assert select(urls["analyzer"], "SELECT task_id, sealed_key FROM analyzer_tasks") == [("a" * 32, b"sealed")]


def test_a_downgrade_that_fails_part_way_changes_nothing(fresh, cli):
    """c0008's downgrade runs, then c0007's meets a table in its way: the whole transaction is rolled back."""
    url = fresh()
    storage.upgrade_database(url, "collector", create=True)
    insert(url, {"task_numbers": [{"number": 1, "task_id": "a" * 32}],
                 "encapsulations": [{"task": 1, "digest": bytes(32)}]})
    engine = sa.create_engine(url)
    with engine.begin() as c:
        c.execute(sa.text("CREATE TABLE encapsulations_by_id (x INTEGER)"))
    engine.dispose()
    before = contents(url)
    line = error_line(cli("db", "downgrade", "--role", "collector", "--db", url, "--to", "c0006"))
    assert line.startswith("error: db must be a collector database migration c0007's downgrade can run on (nothing "
                           "was changed: the database is still at c0008), got "), line
    assert contents(url) == before


@pytest.mark.parametrize("role, to", [("sharing", "s0003"), ("s1", "s1_0003"), ("analyzer", "a0007")])
def test_a_downgrade_past_the_budget_ledger_with_rows_is_refused_unless_told(fresh, kek, cli, role, to):
    """The ledger (a0008, s0006, s1_0006) is dropped by going back past it, and an upgrade back would start it empty:
    the tasks charged before would no longer count against their population's budget. With a charge or a budget in
    it the downgrade is refused, naming the rows, the database unchanged; an empty ledger goes back; with
    --drop-budget-ledger, a full one too."""
    url, version = fresh(), HEAD[role]
    storage.upgrade_database(url, role, kek=kek, create=True)
    assert cli("db", "downgrade", "--role", role, "--db", url, "--to", to).exit_code == 0  # an empty ledger
    storage.upgrade_database(url, role, kek=kek)
    insert(url, {"budgets": [{"population": "app users", "epsilon": 4.0, "delta": 1e-6, "period": "total"}]})
    for charges in ([], [{"task_id": "a" * 32, "population": "app users", "created": 1.0, "protocol": "dpds",
                          "epsilon": 1.0, "delta": 1e-7, "pld": None}]):
        insert(url, {"budget_charges": charges} if charges else {})
        before = contents(url)
        held = "1 row of budgets" if not charges else "1 row of budget_charges and 1 row of budgets"
        migration = {"sharing": "s0006", "s1": "s1_0006", "analyzer": "a0008"}[role]
        assert error_line(cli("db", "downgrade", "--role", role, "--db", url, "--to", to)) == (
            f"error: to must be {migration} or a newer {role} schema version while the privacy budget ledger holds "
            f"rows (migration {migration}'s downgrade drops it: {held}; upgrading again would start it empty, and the "
            "tasks charged so far would no longer count against their populations' budgets), or --drop-budget-ledger "
            f"once it is backed up (the database was left at {version}), got {to}")
        assert contents(url) == before
    if role == "analyzer":  # a step that cannot go back at all is named first, not the flag that would not help
        assert "migration a0003 does not go back" in error_line(cli("db", "downgrade", "--role", role, "--db", url,
                                                                   "--to", "a0002"))
    done = cli("db", "downgrade", "--role", role, "--db", url, "--to", to, "--drop-budget-ledger")
    assert done.exit_code == 0 and f"downgraded from version {version} to schema version {to}" in done.output
    assert not {"budgets", "budget_charges"} & set(contents(url))


def test_a_task_the_ledgers_upgrade_cannot_read_stops_it_in_one_line(fresh, cli):
    """s0007 charges each task without a charge; one whose stored JSON it cannot read is not left uncharged: the
    upgrade stops, naming it, and the database stays at the version before."""
    url = fresh()
    storage.upgrade_database(url, "sharing", create=True)
    assert storage.downgrade_database(url, "sharing", "s0004") == ("s0007", "s0004")
    insert(url, {"sharing_tasks": [{"task_id": "a" * 32, "task": "{}", "status": "released", "round": 3,
                                    "round_name": "reveal", "deadline": None, "published": "{}", "outcome": None}]})
    before = contents(url)
    assert error_line(cli("db", "upgrade", "--role", "sharing", "--db", url)) == (
        "error: db must be sharing tasks whose stored JSON this release reads (each is charged to the privacy budget "
        f"ledger), got task {'a' * 32}: KeyError: 'parameters'")
    assert contents(url) == before
