"""The servers' operators: ``privagg serve ROLE`` (the collector, the analyzer, the sharing server, TSS's S1 and
S2 as HTTP services), ``privagg db upgrade``, ``privagg db downgrade`` and ``privagg keys kek``. Each command's heavy
imports (FastAPI, SQLAlchemy, uvicorn) load inside it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from ..errors import ParameterError
from .output import EXIT_START_FAILED, _clean_errors, _say


Role = Enum("Role", {name: name for name in ("analyzer", "collector", "sharing", "s1", "s2")}, type=str)


# Seconds a stopping service gives the requests in flight (uvicorn then closes idle keep-alive connections too, which
# TLS ones would otherwise hold open). Cutting a request short loses nothing: a report not yet acknowledged is sent
# again by its client, a batch not yet acknowledged again by the collector.
SHUTDOWN_GRACE = 5
BACKLOG = 16384  # connections the kernel queues before the service accepts them


_DB = typer.Option(None, "--db", help="Database URL (default sqlite:///privagg-ROLE.db in the working folder; "
                                      "postgresql+psycopg://USER@HOST/DB for PostgreSQL): an existing database of "
                                      "this role (another role's is refused; only task create and db upgrade "
                                      "--create make a new one).")


_NEW_DB = typer.Option(None, "--db", help="Database URL (default sqlite:///privagg-ROLE.db in the working folder; "
                                          "postgresql+psycopg://USER@HOST/DB for PostgreSQL): the task's party's "
                                          "database, made if it does not exist (another role's is refused).")


_KEK_FILE = typer.Option(None, "--kek-file", help="Analyzer, S2: the file holding the key-encryption key their private "
                         "keys are sealed under (privagg keys kek); default: the PRIVAGG_KEK environment variable.")


def serve(role: Role = typer.Argument(..., help="analyzer, collector (the shuffle model's parties), sharing (DPDS and "  # type: ignore[valid-type]
                                                "DPDG's server), s1 or s2 (TSS's two servers)."),
          config: Optional[Path] = typer.Option(None, "--config", help="TOML file with a table for each role it "
                                                                       "configures ([collector], [analyzer], "
                                                                       "[sharing], [s1], [s2])."),
          db: Optional[str] = _DB,
          host: Optional[str] = typer.Option(None, "--host", help="Address to listen on (default 127.0.0.1)."),
          port: Optional[int] = typer.Option(None, "--port", help="Port (default 8080 collector, 8081 analyzer)."),
          tls_cert: Optional[Path] = typer.Option(None, "--tls-cert", help="TLS certificate chain (PEM)."),
          tls_key: Optional[Path] = typer.Option(None, "--tls-key", help="TLS private key (PEM)."),
          analyzer: Optional[str] = typer.Option(None, "--analyzer", help="Collector: the analyzer's URL."),
          analyzer_ca: Optional[Path] = typer.Option(None, "--analyzer-ca", help="Collector: CA file for the "
                                                                                 "analyzer's certificate."),
          second_ca: Optional[Path] = typer.Option(None, "--second-ca", help="S1: CA file for S2's certificate "
                                                                             "(TSS hand-overs)."),
          workers: Optional[int] = typer.Option(None, "--workers", help="Analyzer: processes that open messages "
                                                                        "(default one per core)."),
          dask_scheduler: Optional[str] = typer.Option(None, "--dask-scheduler", help="Analyzer: open messages on "
                                                       "this Dask cluster (its workers see the key)."),
          batch_interval: Optional[float] = typer.Option(None, "--batch-interval", help="Collector: seconds "
                                                         "between batch checks (default 1)."),
          partition_root: Optional[Path] = typer.Option(None, "--partition-root", help="Collector and analyzer: "
                                                        "the shared directory where a shuffle task's batch too "
                                                        "large for --memory-budget goes as Arrow partitions."),
          memory_budget: Optional[int] = typer.Option(None, "--memory-budget", help="Bytes a batch (collector) "
                                                      "or one partition (analyzer) may take in memory (default "
                                                      "2 GiB)."),
          kek_file: Optional[Path] = _KEK_FILE) -> None:
    """Run the collector (the shuffler), the analyzer, the sharing server (DPDS, DPDG), or TSS's S1 or S2 as an HTTP
    service.

    Start-up failures are one line on stderr: a setting or a database the service cannot use (exit 2, the
    setting named), anything else, such as a port in use (exit 3)."""
    import logging

    import uvicorn

    from ..service.config import describe, load_config
    from ..service.web import configure_logging, http_protocol, log_event, raise_open_files_limit

    with _clean_errors(), _one_line_start_failure(role.value):
        given = {"--analyzer": analyzer, "--analyzer-ca": analyzer_ca, "--second-ca": second_ca, "--workers": workers,
                 "--dask-scheduler": dask_scheduler, "--batch-interval": batch_interval,
                 "--partition-root": partition_root, "--memory-budget": memory_budget, "--kek-file": kek_file}
        for name, value in given.items():  # refused, not ignored, by a role it does nothing for
            if value is not None and role.value not in SERVE_OPTIONS[name]:
                raise ParameterError(name, f"given only to serve {' or '.join(SERVE_OPTIONS[name])} (it does nothing "
                                     f"for {role.value})", value)
        cfg = load_config(role.value, config, db=db, host=host, port=port,
                          tls_cert=None if tls_cert is None else str(tls_cert),
                          tls_key=None if tls_key is None else str(tls_key), analyzer_url=analyzer,
                          analyzer_ca=None if analyzer_ca is None else str(analyzer_ca),
                          second_ca=None if second_ca is None else str(second_ca), workers=workers,
                          dask_scheduler=dask_scheduler, batch_interval=batch_interval,
                          partition_root=None if partition_root is None else str(partition_root),
                          memory_budget=memory_budget, kek_file=None if kek_file is None else str(kek_file))
        configure_logging(cfg.log_level)
        log = logging.getLogger(f"privagg.{cfg.role}")
        log_event(log, "configuration", **describe(cfg))
        _check_tls(cfg.tls_cert, cfg.tls_key)
        if cfg.role == "collector" and cfg.analyzer_url:  # another service's URL is refused; none answering is not
            from ..service.calls import check_service  # (the analyzer may start after the collector)

            check_service("analyzer", cfg.analyzer_url, "analyzer", timeout=3.0)
        before, after = raise_open_files_limit()
        log_event(log, "open files", limit=after, raised_from=before)
        options = dict(operator_token=cfg.operator_token, api_docs=cfg.api_docs, limits=cfg.limits())
        with _database_at_start(cfg.db):
            if cfg.role == "collector":
                from ..service.shuffle.collector import create_app, open_collector

                collector = open_collector(cfg.db, cfg.analyzer_url, ca_file=cfg.analyzer_ca,
                                           token=cfg.collector_token, quiet=cfg.batch_quiet,
                                           max_batch_reports=cfg.max_batch_reports,
                                           partition_root=cfg.partition_root, memory_budget=cfg.memory_budget)
                app = create_app(collector, cfg.max_body_bytes, cfg.batch_interval, **options)
            elif cfg.role == "sharing":
                from ..service.sharing.server import create_app, open_sharing

                app = create_app(open_sharing(cfg.db), cfg.max_body_bytes, **options)
            elif cfg.role == "s1":
                from ..service.two_servers.servers import create_first_app, open_first_server

                app = create_first_app(open_first_server(cfg.db, second_ca=cfg.second_ca), cfg.max_body_bytes,
                                       **options)
            elif cfg.role == "s2":
                from ..service.keys import KeyEncryptionKey
                from ..service.two_servers.servers import create_second_app, open_second_server

                second = open_second_server(cfg.db, kek=KeyEncryptionKey.load(cfg.kek_file))
                app = create_second_app(second, cfg.max_body_bytes, result_token=cfg.result_token, **options)
            else:
                from ..service.shuffle.analyzer import create_app, open_analyzer
                from ..service.keys import KeyEncryptionKey

                kek = KeyEncryptionKey.load(cfg.kek_file)
                analyzer = open_analyzer(cfg.db, cfg.workers, cfg.dask_scheduler, kek=kek,
                                         partition_root=cfg.partition_root, memory_budget=cfg.memory_budget)
                app = create_app(analyzer, cfg.max_body_bytes, cfg.collector_token, result_token=cfg.result_token,
                                 **options)
        protocol = http_protocol(app)
        log_event(log, "connections", max_connections=protocol.guard.capacity, max_requests=cfg.max_requests,
                  header_timeout=cfg.header_timeout, body_timeout=cfg.body_timeout, idle_timeout=cfg.idle_timeout)
        listening = _listening(cfg.host, cfg.port)
        log_event(log, "listening", host=cfg.host, port=listening.getsockname()[1], tls=cfg.tls_cert is not None)
    # ws="none": no WebSocket route, so no upgrade is served; the idle timeout is the protocol's (idle_timeout);
    # proxy_headers=False: no service reads a client's address or scheme (no access log; the analyzer's one redirect
    # is a relative path), so uvicorn's middleware that takes them from X-Forwarded-* headers (on by default, for
    # clients on 127.0.0.1) would only add a layer and a scan of the headers to every request
    server = uvicorn.Server(uvicorn.Config(
        app, host=cfg.host, port=cfg.port, ssl_certfile=cfg.tls_cert, ssl_keyfile=cfg.tls_key, http=protocol,
        ws="none", proxy_headers=False, backlog=BACKLOG, access_log=False, log_level="warning",
        timeout_graceful_shutdown=SHUTDOWN_GRACE))
    try:  # as uvicorn.run, on the socket bound above
        server.run(sockets=[listening])
    except KeyboardInterrupt:
        pass
    if not server.started:
        raise typer.Exit(EXIT_START_FAILED)


def _listening(host: str, port: int):
    """The service's socket, bound before uvicorn serves on it so that the port it got is logged (``--port 0``
    asks the system for a free one, which nothing said before); a port in use or refused is one line, exit 3."""
    import socket

    try:
        return socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET,
                                    backlog=BACKLOG)
    except OSError as err:
        raise RuntimeError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None


SERVE_OPTIONS = {"--analyzer": ("collector",), "--analyzer-ca": ("collector",), "--second-ca": ("s1",),
                 "--workers": ("analyzer",), "--dask-scheduler": ("analyzer",), "--batch-interval": ("collector",),
                 "--partition-root": ("collector", "analyzer"), "--memory-budget": ("collector", "analyzer"),
                 "--kek-file": ("analyzer", "s2")}  # the roles each of serve's role-specific options applies to


def _check_tls(cert: str | None, key: str | None) -> None:
    """The TLS certificate chain and its key load (checked before uvicorn, which would fail with a traceback,
    or prompt on the terminal for an encrypted key's password)."""
    if cert is None:
        return
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key, password=lambda: b"")
    except (OSError, ssl.SSLError) as err:
        raise ParameterError("tls_cert/tls_key", "a readable PEM certificate chain and its unencrypted private key",
                             f"{cert}, {key} ({getattr(err, 'strerror', None) or err})") from None


@contextmanager
def _database_at_start(url: str) -> Iterator[None]:
    """A database the service cannot open, migrate or write at start (a missing folder, a read-only file, a
    server that refuses) is a ParameterError naming ``db``; its password is not shown."""
    import sqlalchemy as sa

    from ..service.storage import shown_url

    try:
        yield
    except sa.exc.SQLAlchemyError as err:
        cause = getattr(err, "orig", None) or err
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        raise ParameterError("db", "a database this service can open and write",
                             f"{shown_url(url)} "
                             f"({type(cause).__name__}: {first})") from None


@contextmanager
def _one_line_start_failure(role: str) -> Iterator[None]:
    """Any other failure while the service starts: one line on stderr and exit 3, not a traceback (a
    ParameterError passes through, for _clean_errors)."""
    try:
        yield
    except (ParameterError, typer.Exit):
        raise
    except Exception as err:
        text = str(err).strip().splitlines()[0] if str(err).strip() else ""
        _say(f"error: the {role} did not start: {type(err).__name__}: {text}", stderr=True)
        raise typer.Exit(EXIT_START_FAILED) from None


db_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The services' databases.")


@db_app.command("upgrade")
def db_upgrade(role: Role = typer.Option(..., "--role", help="Whose database: analyzer, collector, sharing, s1 or s2."),  # type: ignore[valid-type]
               db: Optional[str] = _DB,
               create: bool = typer.Option(False, "--create", help="Make the database if it does not exist (the "
                                           "collector's before its first tokens; the others' task create makes "
                                           "theirs); without it, a database that does not exist is refused."),
               kek_file: Optional[Path] = _KEK_FILE) -> None:
    """Bring a service's database to this release's schema (the services refuse an older one rather than upgrade
    it under other processes), or make a new one with --create. Stop that party's processes of the older release
    first. The analyzer's and S2's upgrade to sealed keys needs their key-encryption key (--kek-file or
    PRIVAGG_KEK). The database must be ROLE's: another role's is refused."""
    import os

    from ..service.config import load_config
    from ..service.keys import ENV, KeyEncryptionKey
    from ..service.storage import shown_url, upgrade_database

    with _clean_errors():
        cfg = load_config(role.value, db=db, kek_file=None if kek_file is None else str(kek_file))
        kek = KeyEncryptionKey.load(cfg.kek_file) if cfg.kek_file or os.environ.get(ENV) else None
        before, now = upgrade_database(cfg.db, role.value, kek=kek, create=create)
    where = shown_url(cfg.db)
    _say(f"the {role.value} database {where}: " + ("made" if before is None else f"upgraded from version {before}"
                                                    if before != now else "already") + f" at schema version {now}")


@db_app.command("downgrade")
def db_downgrade(role: Role = typer.Option(..., "--role", help="Whose database: analyzer, collector, sharing, s1 or s2."),  # type: ignore[valid-type]
                 db: Optional[str] = _DB,
                 to: str = typer.Option(..., "--to", help="The schema version to go back to: the newest of the "
                                        "release rolled back to (it names it when it refuses this release's "
                                        "database)."),
                 drop_budget_ledger: bool = typer.Option(False, "--drop-budget-ledger", help="Go back past a0008, "
                                                         "s0006 or s1_0006 although the privacy budget ledger holds "
                                                         "rows (back it up first: an upgrade back starts it "
                                                         "empty).")) -> None:
    """Take a service's database back to an older release's schema version, to roll back to that release: run it with
    this (the newer) release, with every process of that party stopped (refused while one of this release's services
    holds the database's lock: a process of either release would meet a schema it does not know), before the older
    release starts. Back the database up
    first: what only the newer versions keep is dropped (their tables and columns). The migrations' downgrades run in
    one transaction; a step that does not go back (a0003, s2_0002: they would write the private keys raw again) is
    refused before anything changes, and so is one that drops a privacy budget ledger with rows (a0008, s0006,
    s1_0006: an upgrade back would start it empty, and the tasks charged before would no longer count against their
    budgets) unless --drop-budget-ledger. The database must be ROLE's: another role's is refused."""
    from ..service.config import load_config
    from ..service.storage import downgrade_database, shown_url

    with _clean_errors():
        cfg = load_config(role.value, db=db)
        before, now = downgrade_database(cfg.db, role.value, to, drop_budget_ledger)
    where = shown_url(cfg.db)
    _say(f"the {role.value} database {where}: downgraded from version {before} to schema version {now}")


keys_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The analyzer's key-encryption key.")


@keys_app.command("kek")
def keys_kek(output: Path = typer.Option(..., "--output", help="The new file (created mode 0600; an existing file is "
                                                               "never overwritten).")) -> None:
    """Make a key-encryption key for the analyzer: its tasks' private keys are sealed under it in its database
    (AES-256-GCM). Give it to the analyzer as --kek-file FILE, or its content as PRIVAGG_KEK; keep it apart from
    the database and its backups: without it, the keys and so the tasks' messages cannot be opened."""
    from ..service.keys import KeyEncryptionKey

    with _clean_errors():
        kek = KeyEncryptionKey.generate()
        kek.write(output)
    _say(f"key-encryption key {kek.kek_id} written to {output}")
