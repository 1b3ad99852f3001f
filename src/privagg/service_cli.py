"""The service commands of ``privagg``: serve, task, tokens, submit, loadgen, result, demo-service.

Added to the command line by :func:`add_service_commands` (cli.py). Each command's heavy imports (FastAPI,
SQLAlchemy, uvicorn, httpx) load inside it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from .cli_output import EXIT_START_FAILED, _check_output, _clean_errors, _console, _emit, _say, format_option
from .errors import ParameterError, check_integer

Role = Enum("Role", {name: name for name in ("analyzer", "collector", "sharing", "s1", "s2")}, type=str)

TokenServer = Enum("TokenServer", {name: name for name in ("collector", "sharing", "s1")}, type=str)

task_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Tasks of the analyzer service.")
tokens_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="One-use client tokens of the collector.")
keys_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The analyzer's key-encryption key.")
db_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The services' databases.")

# Seconds a stopping service gives the requests in flight (uvicorn then closes idle keep-alive connections too, which
# TLS ones would otherwise hold open). Cutting a request short loses nothing: a report not yet acknowledged is sent
# again by its client, a batch not yet acknowledged again by the collector.
SHUTDOWN_GRACE = 5

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

    from .service.config import describe, load_config
    from .service.web import configure_logging, http_protocol, log_event, raise_open_files_limit

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
        before, after = raise_open_files_limit()
        log_event(log, "open files", limit=after, raised_from=before)
        options = dict(operator_token=cfg.operator_token, api_docs=cfg.api_docs, limits=cfg.limits())
        with _database_at_start(cfg.db):
            if cfg.role == "collector":
                from .service.collector import create_app, open_collector

                collector = open_collector(cfg.db, cfg.analyzer_url, ca_file=cfg.analyzer_ca,
                                           token=cfg.collector_token, quiet=cfg.batch_quiet,
                                           max_batch_reports=cfg.max_batch_reports,
                                           partition_root=cfg.partition_root, memory_budget=cfg.memory_budget)
                app = create_app(collector, cfg.max_body_bytes, cfg.batch_interval, **options)
            elif cfg.role == "sharing":
                from .service.sharing import create_app, open_sharing

                app = create_app(open_sharing(cfg.db), cfg.max_body_bytes, **options)
            elif cfg.role == "s1":
                from .service.two_servers import create_first_app, open_first_server

                app = create_first_app(open_first_server(cfg.db, second_ca=cfg.second_ca), cfg.max_body_bytes,
                                       **options)
            elif cfg.role == "s2":
                from .service.keys import KeyEncryptionKey
                from .service.two_servers import create_second_app, open_second_server

                second = open_second_server(cfg.db, kek=KeyEncryptionKey.load(cfg.kek_file))
                app = create_second_app(second, cfg.max_body_bytes, **options)
            else:
                from .service.analyzer import create_app, open_analyzer
                from .service.keys import KeyEncryptionKey

                kek = KeyEncryptionKey.load(cfg.kek_file)
                analyzer = open_analyzer(cfg.db, cfg.workers, cfg.dask_scheduler, kek=kek,
                                         partition_root=cfg.partition_root, memory_budget=cfg.memory_budget)
                app = create_app(analyzer, cfg.max_body_bytes, cfg.collector_token, result_token=cfg.result_token,
                                 **options)
        protocol = http_protocol(app)
        log_event(log, "connections", max_connections=protocol.guard.capacity, max_requests=cfg.max_requests,
                  header_timeout=cfg.header_timeout, body_timeout=cfg.body_timeout, idle_timeout=cfg.idle_timeout)
    # ws="none": no WebSocket route, so no upgrade is served; the idle timeout is the protocol's (idle_timeout)
    uvicorn.run(app, host=cfg.host, port=cfg.port, ssl_certfile=cfg.tls_cert, ssl_keyfile=cfg.tls_key, http=protocol,
                ws="none", backlog=16384, access_log=False, log_level="warning",
                timeout_graceful_shutdown=SHUTDOWN_GRACE)


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

    try:
        yield
    except sa.exc.SQLAlchemyError as err:
        cause = getattr(err, "orig", None) or err
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        raise ParameterError("db", "a database this service can open and write",
                             f"{sa.engine.make_url(url).render_as_string(hide_password=True)} "
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


def task_service(entry) -> str:
    """Which service holds a task of ``entry``'s protocol, by its topology: the sharing server, TSS's two servers,
    or the analyzer (a one-round task; the analyzer refuses one it does not run)."""
    from .protocols.kinds import Topology

    return {Topology.SECRET_SHARING: "sharing", Topology.TWO_SERVERS: "two-servers"}.get(entry.topology, "analyzer")


def _tasks_of(services: tuple[str, ...]) -> str:
    """The protocols whose tasks ``services`` hold, as prose."""
    from .protocols.registry import listed, names

    return listed(names(lambda e: task_service(e) in services))


_ONE_ROUND = (("analyzer",), lambda: f"a one-round task (the analyzer's: not {_tasks_of(('sharing', 'two-servers'))})")
_ROUND_TASKS = (("sharing", "two-servers"), lambda: f"a {_tasks_of(('sharing', 'two-servers'))} task")
_TSS = (("two-servers",), lambda: f"a {_tasks_of(('two-servers',))} task (S1 and S2)")
TASK_OPTIONS = {"--min-batch-size": _ONE_ROUND, "--key-id": _ONE_ROUND, "--kem": _ONE_ROUND, "--candidates": _ONE_ROUND,
                "--discover-phi": _ONE_ROUND, "--round-seconds": _ROUND_TASKS, "--min-survivors": _ROUND_TASKS,
                "--kek-file": (("analyzer", "two-servers"), lambda: f"a task of the analyzer, or of "
                               f"{_tasks_of(('two-servers',))} (S2's key)"),
                **dict.fromkeys(("--second-db", "--second-url", "--s2", "--second-task", "--relay-token-file"), _TSS)}
# (the services whose tasks each of task create's options applies to, and how its refusal names them)

_ALL_N_WARNING = ("warning: a shuffle task with honest fraction 1 needs all n reports: one absent user stalls it (it "
                  "can be closed only with all n); calibrate with a lower honest fraction (--honest-fraction G) to be "
                  "able to close it at ceil(G n) reports")


@task_app.command("create")
def task_create(params: Path = typer.Option(..., "--params", help="Frozen parameters (privagg calibrate PROTOCOL "
                                                                  "--json > params.json)."),
                db: Optional[str] = _NEW_DB,
                min_batch_size: Optional[int] = typer.Option(None, "--min-batch-size", help="Fewest reports in a "
                                                             "released batch (default n; at least G n in the "
                                                             "shuffle model)."),
                key_id: Optional[int] = typer.Option(None, "--key-id", help="The key's id, 0..255 (default: the "
                                                     "one after the newest task's)."),
                kem: Optional[str] = typer.Option(None, "--kem", help="x25519 (default) or mlkem768-x25519: the "
                                                  "hybrid post-quantum KEM (X-Wing), 1,136 bytes per message "
                                                  "instead of 48."),
                round_seconds: Optional[float] = typer.Option(None, "--round-seconds", help="dpds, dpdg, tss: each "
                                                              "round's deadline from its start (default 3600)."),
                min_survivors: Optional[int] = typer.Option(None, "--min-survivors", help="dpds, dpdg, tss: the "
                                                            "fewest users a release may be over (default n: no "
                                                            "dropout)."),
                second_db: Optional[str] = typer.Option(None, "--second-db", help="tss: S2's database (--db is "
                                                        "S1's, made if it does not exist): the task is made on "
                                                        "both (one operator)."),
                only_second: bool = typer.Option(False, "--s2", help="tss, S2's operator: make S2's task alone in "
                                                 "--db, print its public JSON, and write its relay token to "
                                                 "--relay-token-file for S1's operator."),
                second_task: Optional[Path] = typer.Option(None, "--second-task", help="tss, S1's operator: S2's "
                                                           "public task (the JSON --s2 printed); with "
                                                           "--relay-token-file and --second-url."),
                relay_token_file: Optional[Path] = typer.Option(None, "--relay-token-file", help="tss across two "
                                                                "operators: the file S2's relay token is written "
                                                                "to (--s2, a new file, mode 0600) or read from "
                                                                "(--second-task)."),
                second_url: Optional[str] = typer.Option(None, "--second-url", help="tss: where S1 hands the "
                                                         "helpers' sums over to S2."),
                kek_file: Optional[Path] = _KEK_FILE,
                candidates: Optional[Path] = typer.Option(None, "--candidates", help="Frequency tasks: a file of "
                                                          "the public items the result answers, one a line "
                                                          "(integers, or text hashed with the parameters' "
                                                          "item_key), or a 1-sparse vector sum's coordinates; "
                                                          "required over 2^24 items. Chosen without looking at "
                                                          "the users' data: each is published by name."),
                discover_phi: Optional[float] = typer.Option(None, "--discover-phi", help="sparse-vector-hashed, no "
                                                             "candidates: the paper's two stages as one task, fe-hh "
                                                             "first discovering the coordinates whose sums reach PHI "
                                                             "n at the parameters' (eps, delta), so the task spends "
                                                             "twice theirs (calibrate at half your budget)."),
                as_json: bool = typer.Option(False, "--json", help="Print the task's JSON.")) -> None:
    """Create a task: in the analyzer's database for a one-round protocol (a new HPKE key pair and the frozen
    parameters), in the sharing server's for dpds and dpdg (their users bring their own keys), in S2's and S1's for
    tss and tss-collusion (S2's key pair, and the relay token S1 hands over with)."""
    from .io import read_json_text
    from .protocols.registry import get, load_parameters
    from .service.client import check_url
    from .service.config import load_config
    from .service.storage import connect

    with _clean_errors():
        parameters = load_parameters(read_json_text(params, "params"))
        if second_url is not None:
            second_url = check_url("second-url", second_url)
        given = {"--min-batch-size": min_batch_size, "--key-id": key_id, "--kem": kem, "--candidates": candidates,
                 "--discover-phi": discover_phi, "--round-seconds": round_seconds, "--min-survivors": min_survivors,
                 "--kek-file": kek_file, "--second-db": second_db, "--second-url": second_url,
                 "--s2": only_second or None, "--second-task": second_task, "--relay-token-file": relay_token_file}
        service = task_service(get(parameters.protocol))  # the registry entry's topology picks the service
        for name, value in given.items():  # refused, not ignored, where it does nothing
            if value is not None and service not in TASK_OPTIONS[name][0]:
                raise ParameterError(name, f"given only for {TASK_OPTIONS[name][1]()}", parameters.protocol)
        round_seconds = 3600.0 if round_seconds is None else round_seconds
        if service == "two-servers":
            from .service.keys import KeyEncryptionKey
            from .service.two_servers import FirstService, SecondService, create_tasks

            if only_second:  # S2's operator: S2's task, its public JSON out, the relay token to a private file
                if relay_token_file is None:
                    raise ParameterError("relay-token-file", "given with --s2: the new file S2's relay token is "
                                         "written to, for S1's operator", None)
                cfg = load_config("s2", db=db, kek_file=None if kek_file is None else str(kek_file))
                kek = KeyEncryptionKey.load(cfg.kek_file)
                second, token = SecondService(connect(cfg.db, "s2", kek=kek), kek=kek).create_task(parameters,
                                                                                                   min_survivors)
                _write_private(relay_token_file, token + "\n")
                delta = _release_delta(parameters, second.min_survivors, as_json)
                print(json.dumps({**second.to_dict(), **delta}) if as_json else second.task_id)
                return
            if second_task is not None:  # S1's operator: S2's public task and relay token, from S2's operator
                if second_url is None:
                    raise ParameterError("second-url", "given with --second-task: where S1 hands over to S2", None)
                second, token = _second_task(second_task, parameters), _relay_token(relay_token_file)
                first = FirstService(connect(load_config("s1", db=db).db, "s1"))
                tss = first.create_task(parameters, second, second_url, token, round_seconds)
            else:
                if second_db is None or second_url is None:
                    raise ParameterError("second-db/second-url", "both given for tss from one operator (S2's "
                                         "database and URL), or --s2 and then --second-task across two",
                                         f"{second_db}, {second_url}")
                first = FirstService(connect(load_config("s1", db=db).db, "s1"))
                cfg = load_config("s2", db=second_db, kek_file=None if kek_file is None else str(kek_file))
                kek = KeyEncryptionKey.load(cfg.kek_file)
                second = SecondService(connect(cfg.db, "s2", kek=kek), kek=kek)
                tss = create_tasks(first, second, parameters, second_url, round_seconds, min_survivors)
            if not as_json:
                _say(f"task {tss.task_id} at S1 (S2's task {tss.second_task_id}): {parameters.protocol}, n = "
                     f"{parameters.n_users} users to enroll, rounds of {tss.round_seconds:g} s, at least "
                     f"{tss.min_survivors} survivors")
            delta = _release_delta(parameters, tss.min_survivors, as_json)
            print(json.dumps({**tss.to_dict(), **delta}) if as_json else tss.task_id)
            return
        if service == "sharing":
            from .service.sharing import SharingService

            engine = connect(load_config("sharing", db=db).db, "sharing")
            task = SharingService(engine).create_task(parameters, round_seconds, min_survivors)
            if not as_json:
                _say(f"task {task.task_id}: {parameters.protocol}, n = {parameters.n_users} users to enroll, "
                     f"rounds of {task.round_seconds:g} s, at least {task.min_survivors} survivors")
            delta = _release_delta(parameters, task.min_survivors, as_json)
            print(json.dumps({**task.to_dict(), **delta}) if as_json else task.task_id)
            return
        from .service.analyzer import AnalyzerService
        from .service.keys import KeyEncryptionKey

        cfg = load_config("analyzer", db=db, kek_file=None if kek_file is None else str(kek_file))
        kek = KeyEncryptionKey.load(cfg.kek_file)
        task = AnalyzerService(connect(cfg.db, "analyzer", kek=kek), kek=kek).create_task(
            parameters, min_batch_size, key_id, kem or "x25519",
            None if candidates is None else _candidate_lines(candidates), discover_phi)
    if task.single_batch and parameters.honest_fraction == 1:
        _say(_ALL_N_WARNING if task.discovery is None else _ALL_N_WARNING.split(";")[0] + "; a task with --discover-phi "
             f"cannot lower its honest fraction (its {task.discovery.parameters.protocol} stage counts on every "
             "user's noise)", stderr=True)
    if as_json:
        print(task.to_json())
    else:
        _say(f"task {task.task_id}: {parameters.protocol}, n = {parameters.n_users}, "
             f"min batch {task.min_batch_size} reports, {task.kem} key id {task.key_id}")
        if task.discovery is not None:
            stage = task.discovery.parameters
            _say(f"its first stage: task {task.discovery.task_id}, fe-hh over the {stage.domain_size} cells at phi "
                 f"{stage.phi:g} (the task's guarantee: eps {parameters.epsilon + stage.epsilon:g}, delta "
                 f"{parameters.delta + stage.delta:g}, both stages by basic composition)")
        print(task.task_id)


def _release_delta(parameters, min_survivors: int, as_json: bool) -> dict:
    """A task with rounds (dpds, dpdg, tss): the delta its release states over its fewest survivors, the worst case
    (:func:`~privagg.service.round_tasks.release_delta`), said (unless ``as_json``), and a warning when it exceeds the
    task's target, naming the --min-survivors that keeps it; the JSON fields of both."""
    from .service.round_tasks import release_delta, survivors_for_target

    worst, keeps = release_delta(parameters, min_survivors), survivors_for_target(parameters, min_survivors)
    dropouts = parameters.n_users - min_survivors
    if not as_json:
        _say(f"its release states delta {worst:.3g} at epsilon {parameters.epsilon:g}" + (
            f" over as few as {min_survivors} survivors (the worst case, {dropouts} dropouts)" if dropouts else
            " (no dropout allowed)") + f"; the target delta is {parameters.delta:g}")
    if keeps > min_survivors:
        fewer = ("fewer users, and holders of a category, to hide among" if hasattr(parameters, "min_count_fraction")
                 else "less noise from honest users")
        remedy = (f"--min-survivors {keeps} or more keeps the target" if keeps < parameters.n_users else
                  f"only --min-survivors {keeps}, no dropout, keeps it (or calibrate for a smaller delta to leave room "
                  "for dropouts)")
        _say(f"warning: a release over {min_survivors} survivors would state delta {worst:.3g}, over the task's "
             f"target {parameters.delta:g} (its {dropouts} dropouts leave {fewer}): {remedy}", stderr=True)
    return {"delta_at_min_survivors": worst, "min_survivors_for_target_delta": keeps}


def _write_private(path: Path, text: str, field: str = "relay-token-file") -> None:
    """``text`` to a new file readable by its owner only, from its creation on (an existing file is refused)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as err:
        raise ParameterError(field, "a new file in a writable folder", f"{path} ({err.strerror})") from None
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _second_task(path: Path, parameters):
    """S2's public task from the JSON file S2's operator gave, checked: its parameters must be these."""
    from .service.round_tasks import SecondTask

    try:
        second = SecondTask.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as err:  # what is wrong in words, not the error's class name
        why = err.strerror if isinstance(err, OSError) else f"no field {err}" if isinstance(err, KeyError) else \
            str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        raise ParameterError("second-task", "S2's public task, as privagg task create --s2 --json prints it",
                             f"{path} ({why})") from None
    if second.parameters.to_dict() != parameters.to_dict():
        raise ParameterError("second-task", "S2's task for the same parameters as --params", f"{path}: other ones")
    return second


def _relay_token(path: Path | None) -> str:
    if path is None:
        raise ParameterError("relay-token-file", "given with --second-task: the file with S2's relay token", None)
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise ParameterError("relay-token-file", "a readable file with S2's relay token (ASCII)",
                             f"{path} ({getattr(err, 'strerror', None) or err.reason})") from None


def _candidate_lines(path: Path) -> list:
    """The items of a candidates file, one a line: all integers, or all text. A file of more lines than a task
    takes is refused as soon as its first line too many is read."""
    from .service.analyzer import MAX_CANDIDATES

    lines: list[str] = []
    try:
        with open(path, encoding="utf-8") as text:
            for line in text:
                if line.strip():
                    lines.append(line.strip())
                if len(lines) > MAX_CANDIDATES:
                    raise ParameterError("candidates", f"a file of at most {MAX_CANDIDATES:,} items", f"{path}, more")
    except (OSError, UnicodeDecodeError) as err:
        raise ParameterError("candidates", "a readable UTF-8 file, one item a line", f"{path} ({err})") from None
    return [int(line) for line in lines] if all(line.lstrip("-").isdigit() for line in lines) else lines


@task_app.command("candidates")
def task_candidates(task: str = typer.Option(..., "--task", help="The task id (created with --candidates)."),
                    candidates: Path = typer.Option(..., "--candidates", help="A file of more public items, one a "
                                                    "line (integers, or text hashed with the parameters' item_key), "
                                                    "chosen without looking at the users' data: each is published "
                                                    "by name."),
                    db: Optional[str] = _DB, kek_file: Optional[Path] = _KEK_FILE) -> None:
    """Answer more public candidates in a task created with --candidates, also after its messages arrived: the
    analyzer computes its aggregate again from the messages it kept (the running analyzer answers them at once;
    POST /tasks/{id}/candidates does the same over HTTP)."""
    from .service.analyzer import AnalyzerService
    from .service.config import load_config
    from .service.keys import KeyEncryptionKey
    from .service.storage import connect
    from .service.web import Refused

    with _clean_errors():
        cfg = load_config("analyzer", db=db, kek_file=None if kek_file is None else str(kek_file))
        kek = KeyEncryptionKey.load(cfg.kek_file)
        items = _candidate_lines(candidates)
        try:
            count = AnalyzerService(connect(cfg.db, "analyzer", kek=kek, create=False), kek=kek).add_candidates(task,
                                                                                                               items)
        except Refused as err:  # an unknown task id
            raise ParameterError("task", "a task of this analyzer", f"{task} ({err.detail})") from None
    _say(f"task {task} answers {count:,} candidates")


@task_app.command("close")
def task_close(task: str = typer.Option(..., "--task", help="The task id."), db: Optional[str] = _DB) -> None:
    """Close a task at the collector: no report is taken after, and a shuffle task's reports form its one batch
    if at least its minimum (ceil(G n) or more) came."""
    from .service.collector import Collector
    from .service.config import load_config
    from .service.storage import connect
    from .service.tasks import is_hex_id

    with _clean_errors():
        if not is_hex_id(task):
            raise ParameterError("task", "a task id (32 lowercase hexadecimal characters, the whole id)", task)
        engine = connect(load_config("collector", db=db).db, "collector", create=False)
        waiting, before = Collector(engine, None, None).close(task)
    last = f"; its {waiting} waiting reports form its last batch" if waiting else ""
    _say({None: f"closed task {task}: no report is taken after{last}",
          "closed": f"task {task} was already closed (nothing changed): no report is taken after{last}",
          "released": f"task {task} already took no report (nothing changed): its one batch was released"}[before])


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

    from sqlalchemy.engine import make_url

    from .service.config import load_config
    from .service.keys import ENV, KeyEncryptionKey
    from .service.storage import upgrade_database

    with _clean_errors():
        cfg = load_config(role.value, db=db, kek_file=None if kek_file is None else str(kek_file))
        kek = KeyEncryptionKey.load(cfg.kek_file) if cfg.kek_file or os.environ.get(ENV) else None
        before, now = upgrade_database(cfg.db, role.value, kek=kek, create=create)
    where = make_url(cfg.db).render_as_string(hide_password=True)
    _say(f"the {role.value} database {where}: " + ("made" if before is None else f"upgraded from version {before}"
                                                    if before != now else "already") + f" at schema version {now}")


@keys_app.command("kek")
def keys_kek(output: Path = typer.Option(..., "--output", help="The new file (created mode 0600; an existing file is "
                                                               "never overwritten).")) -> None:
    """Make a key-encryption key for the analyzer: its tasks' private keys are sealed under it in its database
    (AES-256-GCM). Give it to the analyzer as --kek-file FILE, or its content as PRIVAGG_KEK; keep it apart from
    the database and its backups: without it, the keys and so the tasks' messages cannot be opened."""
    from .service.keys import KeyEncryptionKey

    with _clean_errors():
        kek = KeyEncryptionKey.generate()
        kek.write(output)
    _say(f"key-encryption key {kek.kek_id} written to {output}")


@tokens_app.command("issue")
def tokens_issue(task: str = typer.Option(..., "--task", help="The task id."),
                 count: int = typer.Option(..., "--count", help="How many tokens."),
                 db: Optional[str] = _DB,
                 server: TokenServer = typer.Option("collector", "--server", help="collector (a one-round task's "  # type: ignore[valid-type]
                                                    "reports), sharing (a dpds or dpdg task's enrollments) or s1 "
                                                    "(a tss task's)."),
                 analyzer: Optional[str] = typer.Option(None, "--analyzer", help="collector: the analyzer's URL, "
                                                        "where a task the collector does not know yet is fetched "
                                                        "(default: the collector's analyzer_url setting)."),
                 analyzer_ca: Optional[Path] = typer.Option(None, "--analyzer-ca", help="collector: CA file for the "
                                                            "analyzer's certificate."),
                 output: Optional[Path] = typer.Option(None, "--output", help="Write the tokens to FILE, a new one "
                                                       "(mode 0600; an existing file is never overwritten), one a "
                                                       "line, instead of stdout.")) -> None:
    """Issue one-use client tokens for a task of the server (it keeps only their hashes). The task must exist: the
    sharing server and S1 hold theirs; the collector learns a task from the analyzer (--analyzer), once."""
    from .service.config import load_config
    from .service.storage import connect
    from .service.tasks import is_hex_id

    with _clean_errors():
        if not is_hex_id(task):
            raise ParameterError("task", "a task id (32 lowercase hexadecimal characters)", task)
        count = check_integer("count", count, 1, 10_000_000)
        if server.value != "collector" and (analyzer or analyzer_ca):
            raise ParameterError("analyzer" if analyzer else "analyzer-ca", "given only with --server collector",
                                 server.value)
        cfg = load_config(server.value, db=db, analyzer_url=analyzer,
                          analyzer_ca=None if analyzer_ca is None else str(analyzer_ca))
        if output is not None and (output.exists() or output.is_symlink()):
            raise ParameterError("output", "a new file (an existing one is never overwritten: its tokens may be "
                                 "out already)", str(output))
        _check_output(output)  # before the tokens are issued: none is lost for a file that cannot be written
        engine = connect(cfg.db, server.value, create=False)
        if server.value == "sharing":
            from .service.sharing import SharingService

            issued = SharingService(engine).issue_tokens(task, count)
        elif server.value == "s1":
            from .service.two_servers import FirstService

            issued = FirstService(engine).issue_tokens(task, count)
        else:
            issued = _collector_tokens(engine, cfg, task, count)
        text = "\n".join(issued) + "\n"
        if output is None:
            sys.stdout.write(text)
        else:
            _write_private(output, text, "output")


def _collector_tokens(engine, cfg, task_id: str, count: int) -> list[str]:
    """The collector's tokens for a task it knows, or fetches now from the analyzer (``cfg.analyzer_url``) and
    keeps, as it does at a task's first report: tokens of a task that does not exist are refused."""
    import logging

    from .service.collector import Collector, http_peer
    from .service.web import Refused

    fetch = None if cfg.analyzer_url is None else http_peer(cfg.analyzer_url, ca_file=cfg.analyzer_ca)[0]
    collector = Collector(engine, fetch or (lambda _task_id: None), None)
    log = logging.getLogger("privagg.collector")
    level, _ = log.level, log.setLevel(logging.ERROR)  # its "task not fetched" warning: the error below says it
    try:
        collector.task(task_id)
    except Refused as err:
        if fetch is None:
            raise ParameterError("task", "a task this collector knows (it learns one from the analyzer: give "
                                 "--analyzer URL to fetch it)", task_id) from None
        if err.status == 503:  # no answer, or not a task
            raise ParameterError("analyzer", "a reachable analyzer URL", f"{cfg.analyzer_url} ({err.detail})") \
                from None
        raise ParameterError("task", f"a task of the analyzer at {cfg.analyzer_url}", task_id) from None
    finally:
        log.setLevel(level)
    return collector.issue_tokens(task_id, count)


def _takes_text(parameters) -> bool:
    """Whether a task's users may hold text: fe-hh's strings, or items hashed with the task's public item_key."""
    return getattr(parameters, "max_length", None) is not None or getattr(parameters, "item_key", None) is not None


def _value(text: str, parameters):
    """A user's value as given: JSON (an integer item, a list: a vector or a (coordinate, weight) pair, or a string),
    else the text itself, a string item; a string only for a task that takes text (:func:`_takes_text`), which the
    SDK hashes with the task's item_key as every device does."""
    from .protocols.kinds import ResultKind
    from .protocols.registry import get

    try:
        value = json.loads(text)
    except ValueError:
        value = text
    items = get(parameters.protocol).result is not ResultKind.VECTOR_SUM
    accepted = (f"an integer item in [0, {parameters.domain_size})" if items else "a JSON list (a vector, or a "
                "[coordinate, weight] pair)") + (", or text (an item)" if _takes_text(parameters) else
                                                 " (the task takes no text: its parameters have no item_key)")
    if isinstance(value, str):
        taken = value != "" and _takes_text(parameters)
    elif isinstance(value, int) and not isinstance(value, bool):
        taken = items and 0 <= value < parameters.domain_size
    else:
        taken = isinstance(value, list) and not items
    if not taken:
        raise ParameterError("value", accepted, repr(text) if text.strip() != text or not text else text)
    return value


def _service(url: str, field: str, service: str) -> str:
    """``url`` checked (:func:`~privagg.service.client.check_url`), and refused where another privagg service
    answers (the collector's URL given as the analyzer's, ...), naming it."""
    from .service.client import check_url, service_at

    url = check_url(field, url)
    found = service_at(url)
    if found is not None and found != f"privagg {service}":
        raise ParameterError(field, f"the {service}'s URL", f"{url}, where the {found} answers")
    return url


_TASK_FROM = typer.Option(None, "--analyzer", help="Fetch the task (and the key messages are sealed to) from the "
                                                   "analyzer at this URL (default: through the collector, which is "
                                                   "then trusted with the key).")
_TASK_VIA_COLLECTOR = ("warning: the task and its key came through the collector: a collector that lied about the "
                       "key could read the messages; give --analyzer to fetch them from the analyzer")


def submit(collector: str = typer.Option(..., "--collector", help="The collector's URL."),
           task: str = typer.Option(..., "--task", help="The task id."),
           analyzer: Optional[str] = _TASK_FROM,
           token: str = typer.Option(..., "--token", help="A one-use token of the task."),
           value: str = typer.Option(..., "--value", help="Your value: an integer item, a JSON list (a vector, or a "
                                     "[coordinate, weight] pair), or for a task of text items the text itself (hashed "
                                     "with the task's item_key; '\"42\"' for the text 42).")) -> None:
    """Send one report: randomize the value with secure randomness, seal each message, submit."""
    from .service.client import Client, SubmitError, submit as send

    with _clean_errors():
        collector = _service(collector, "collector", "collector")
        analyzer = None if analyzer is None else _service(analyzer, "analyzer", "analyzer")
        if analyzer is None:
            _say(_TASK_VIA_COLLECTOR, stderr=True)
        try:
            client = Client.fetch(analyzer or collector, task)
            status = send(collector, client.report(_value(value, client.task.parameters), token))
        except SubmitError as err:
            raise ParameterError("report", "accepted by the collector", str(err)) from None
    _say(f"report {status}")


def _load_values(parameters, path: Path, fmt=None):
    """The values of a load run, one per row (CSV/TSV/Parquet/text) read as ``fmt`` (an io.InputFormat) says: items,
    or vectors (.npy/CSV rows). A task of text items takes text as its SDK does: fe-hh's strings as they are, other
    items hashed with the task's public item_key (integers are item codes); a task without an item_key takes integer
    items only."""
    from dataclasses import replace

    from .core.encoding import ItemEncoder
    from .io import InputFormat, read_codes, read_items, read_vectors
    from .protocols.kinds import ResultKind
    from .protocols.registry import get

    fmt = InputFormat() if fmt is None else fmt
    if get(parameters.protocol).result is ResultKind.VECTOR_SUM:
        return [row for row in read_vectors(path, fmt)]
    if getattr(parameters, "max_length", None) is not None:
        items, _ = read_items(path, fmt)
        return list(items) if isinstance(items, list) else items.tolist()
    if _takes_text(parameters):
        return read_codes(path, ItemEncoder.for_parameters(parameters), fmt).codes.tolist()
    if fmt.item_type == "str":
        raise ParameterError("item-type", "auto or int for a task that takes no text (its parameters have no "
                             "item_key)", fmt.item_type)
    encoder = ItemEncoder(parameters.domain_size, kind="integer")
    return read_codes(path, encoder, replace(fmt, item_type="int")).codes.tolist()


def loadgen(collector: str = typer.Option(..., "--collector", help="The collector's URL."),
            task: str = typer.Option(..., "--task", help="The task id."),
            input: Path = typer.Option(..., "--input", help="One value per simulated client, one a row: integer "
                                       "items, text items for a task of text (as submit --value), or vectors."),
            column: Optional[str] = format_option("column"), item_type: str = format_option("item_type"),
            delimiter: Optional[str] = format_option("delimiter"), header: bool = format_option("header"),
            missing: str = format_option("missing"),
            tokens: Path = typer.Option(..., "--tokens", help="Tokens of the task, one a line (privagg tokens "
                                                              "issue)."),
            concurrency: int = typer.Option(100, "--concurrency", help="Reports in flight at once."),
            retry_for: float = typer.Option(120.0, "--retry-for", help="Seconds a client keeps retrying."),
            analyzer: Optional[str] = _TASK_FROM,
            as_json: bool = typer.Option(False, "--json", help="Print the JSON summary.")) -> None:
    """Simulated clients, each a real SDK client over HTTP: acknowledged, refused, throughput, latency."""
    from .io import InputFormat
    from .service.client import Client, SubmitError
    from .service.loadgen import run_load

    with _clean_errors():
        fmt = InputFormat(item_type, column, delimiter, header, missing)
        concurrency = check_integer("concurrency", concurrency, 1, 100_000)
        if not 0 <= retry_for <= 86_400:
            raise ParameterError("retry-for", "a number of seconds in [0, 86400]", retry_for)
        collector = _service(collector, "collector", "collector")
        analyzer = None if analyzer is None else _service(analyzer, "analyzer", "analyzer")
        if analyzer is None:
            _say(_TASK_VIA_COLLECTOR, stderr=True)
        try:
            client = Client.fetch(analyzer or collector, task)
        except SubmitError as err:
            raise ParameterError("task", "a task the service serves", str(err)) from None
        try:
            issued = tokens.read_text(encoding="ascii").split()
        except (OSError, UnicodeDecodeError) as e:  # tokens are ASCII: UTF-16 or binary data is not a tokens file
            raise ParameterError("tokens", "a readable file of tokens (ASCII, one a line)",
                                 f"{tokens} ({getattr(e, 'strerror', None) or e.reason})") from None
        result = run_load(collector, client, _load_values(client.task.parameters, input, fmt), issued, concurrency,
                          retry_for)
    if as_json:
        print(result.to_json())
        return
    lat = result.latency_ms
    reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(result.refusals.items()))
    _say(f"{result.clients} clients: {result.acknowledged} acknowledged, {result.refused} refused"
         f"{f' ({reasons})' if reasons else ''}, {result.failed} failed; {result.messages_acknowledged} messages")
    latency = "no latency (none acknowledged)" if lat["p50"] is None else (
        f"latency p50 {lat['p50']:.0f} ms, p90 {lat['p90']:.0f} ms, p99 {lat['p99']:.0f} ms")
    _say(f"sent in {result.send_seconds:.1f} s at concurrency {result.concurrency}: {result.reports_per_second:.0f} "
         f"reports/s; {latency}; {result.retries} retries; reports made in {result.prepare_seconds:.1f} s")


def result(analyzer: str = typer.Option(..., "--analyzer", help="The analyzer's URL."),
           task: str = typer.Option(..., "--task", help="The task id."),
           top: int = typer.Option(10, "--top", help="How many top items (or coordinates) to list."),
           as_json: bool = typer.Option(False, "--json", help="Print the JSON report."),
           output: Optional[Path] = typer.Option(None, "--output", help="Write the JSON report to FILE.")) -> None:
    """The task's private result, as the analyzer serves it (the report privagg analyze prints). An analyzer that
    asks for its result token gets it from PRIVAGG_ANALYZER_RESULT_TOKEN."""
    import os

    import httpx

    from .service.tasks import is_hex_id

    with _clean_errors():
        if not is_hex_id(task):
            raise ParameterError("task", "a task id (32 lowercase hexadecimal characters, the whole id)", task)
        top = check_integer("top", top, 1, MAX_TOP)
        analyzer = _service(analyzer, "analyzer", "analyzer")
        token = os.environ.get("PRIVAGG_ANALYZER_RESULT_TOKEN")
        headers = {} if not token else {"authorization": f"Bearer {token}"}
        try:
            answer = httpx.get(f"{analyzer}/tasks/{task}/result", params={"top": top}, timeout=120, headers=headers)
        except httpx.TransportError as err:
            raise ParameterError("analyzer", "a reachable analyzer URL", f"{analyzer} ({err})") from None
        try:
            report = answer.json()
        except ValueError:
            report = None
        if answer.status_code != 200 or not isinstance(report, dict):
            _refused_result(analyzer, task, answer.status_code, report, answer.text, token)
    _emit(report, as_json, output, lambda: print_result(report, top))


MAX_TOP = 100_000  # the analyzer's result route takes top in 1..100,000


def _refused_result(analyzer: str, task: str, status: int, refusal, text: str, token: str | None) -> None:
    """The analyzer's refusal of a result as the ParameterError of whichever input it concerns: the task (unknown,
    or not released), the result token, or the URL (an answer that is not the analyzer's)."""
    reason, detail = (refusal.get("error"), refusal.get("detail")) if isinstance(refusal, dict) else (None, None)
    if reason in ("not_released", "nothing_discovered"):  # no result yet: not an error in the task id
        why = detail.removeprefix(f"task {task} ") if isinstance(detail, str) else reason
        raise ParameterError("task", "a task whose result was released", f"{task}, which {why}")
    if reason == "unknown_task":
        raise ParameterError("task", f"a task of the analyzer at {analyzer}", task)
    if reason == "unauthenticated":
        raise ParameterError("PRIVAGG_ANALYZER_RESULT_TOKEN", "the analyzer's result token",
                             "a token the analyzer refused" if token else "none")
    shown = detail if isinstance(detail, str) else " ".join(text.split())[:200]
    raise ParameterError("analyzer", "the analyzer's URL, answering the result", f"{analyzer} (it answered {status}: "
                         f"{shown})")


def _label(privacy) -> str:
    """A release's privacy in a title: computed from its guarantee (:func:`privagg.reports.document_privacy`)."""
    return "private" if privacy.private else "NOT PRIVATE"


def _say_release_privacy(privacy, prefix: str = "", suffix: str = "") -> None:
    """A served release's guarantee as privagg estimate prints one (its summary), and why it is not private."""
    _say(f"{prefix}{privacy.summary()}{suffix}")
    if not privacy.private:
        _say(f"  why: {privacy.not_private_reason}")


def print_result(report: dict, top: int) -> None:
    from rich.table import Table

    from .reports import document_privacy

    privacy = document_privacy(report)
    table = Table(title=f"{report['protocol']}: the analyzer's result ({_label(privacy)})")
    for column in ("item", "estimate ± stderr"):
        table.add_column(column, justify="right")
    for row in report.get("estimates", report.get("heavy_hitters"))[:top]:  # fe-hh: the heavy hitters it found
        table.add_row(str(row["item"]), f"{row['estimate']:.1f} ± {row['stderr']:.1f}")
    _console().print(table)
    c = report["collection"]
    _say_release_privacy(privacy, suffix=f"; honest fraction {privacy.honest_fraction:g}")
    _say(f"collection: {c['reports']} reports in {c['batches']} batches; {report['messages']['total']} messages, "
         f"{c['unopened']} unopened and {c['malformed']} malformed dropped")


def demo_kind(entry) -> str:
    """What demo-service runs for ``entry`` (a registry entry with ``demo``): the rounds of a multi-round protocol,
    a heavy-hitter discovery, or a frequency table's top words, through the services."""
    from .protocols.kinds import ResultKind

    return ("rounds" if entry.multi_round else "heavy hitters" if entry.result is ResultKind.HEAVY_HITTER_LIST
            else "frequencies")


def _demos() -> list[str]:
    from .protocols.registry import names

    return names(lambda e: e.demo)


DemoProtocol = Enum("DemoProtocol", {name: name for name in _demos()}, type=str)
DEMO_OPTIONS = {"--vocabulary": ("frequencies",), "--concurrency": ("frequencies", "heavy hitters"),
                "--top": ("frequencies",), "--drop-fraction": ("rounds",),
                "--round-seconds": ("rounds",)}  # the kinds of demo each option applies to


def _interrupted(_signum, _frame) -> None:
    """SIGTERM as Ctrl-C: the demo's context managers stop the services it started (SIGTERM's default action would
    end the demo at once, its child processes left running)."""
    raise KeyboardInterrupt


def demo_service(protocol: DemoProtocol = typer.Argument("fe1", help="fe1: the shuffle model's collector and "  # type: ignore[valid-type]
                                                         "analyzer; fe-hh: the same, discovering the heavy words "
                                                         "with no list; dpds or dpdg: the sharing server and its users; "
                                                         "tss or tss-collusion: S1, S2 and their users."),
                 users: Optional[int] = typer.Option(None, "--users", help="Users drawn from the bundled English "
                                                     "words (default 20,000 for fe1 and fe-hh, 300 for the others)."),
                 vocabulary: Optional[int] = typer.Option(None, "--vocabulary", help="fe1 only: the most common "
                                                          "words, the domain (default 1,000; fe-hh takes the words "
                                                          "of up to 4 letters, the others the 10 most common)."),
                 epsilon: float = typer.Option(1.0, "--epsilon", help="Privacy parameter epsilon."),
                 delta: float = typer.Option(1e-6, "--delta", help="Privacy parameter delta."),
                 concurrency: Optional[int] = typer.Option(None, "--concurrency", help="fe1 and fe-hh only: reports "
                                                           "in flight at once (default 500)."),
                 drop_fraction: Optional[float] = typer.Option(None, "--drop-fraction", help="dpds, dpdg, tss and "
                                                               "tss-collusion only: the share of users who vanish "
                                                               "(default 0), each at a round drawn at random: "
                                                               "round 1, 2 or 3 for dpds and dpdg, round 1 or 2 "
                                                               "for tss and tss-collusion."),
                 round_seconds: Optional[float] = typer.Option(None, "--round-seconds", help="dpds, dpdg, tss and "
                                                               "tss-collusion only: each round's deadline from its "
                                                               "start (default 300)."),
                 workdir: Path = typer.Option(Path("privagg-demo-service"), "--workdir",
                                              help="Folder for the services' databases and logs: a new or empty "
                                                   "one, or one an earlier demo made (it replaces its databases "
                                                   "there)."),
                 top: Optional[int] = typer.Option(None, "--top", help="fe1 only: how many top words to show "
                                                   "(default 10; fe-hh shows every heavy word found, the others "
                                                   "every category)."),
                 as_json: bool = typer.Option(False, "--json", help="Print the JSON of both reports and the "
                                                                    "comparison.")) -> None:
    """Start the services on localhost, send the bundled words through them as real SDK clients, show the private
    result beside the simulation's. An option that does not apply to the protocol is refused, not ignored.
    SIGTERM (or Ctrl-C) stops the services it started before it exits (status 130)."""
    import signal

    from .protocols.registry import get, listed, names

    given = {"--vocabulary": vocabulary, "--concurrency": concurrency, "--top": top, "--drop-fraction": drop_fraction,
             "--round-seconds": round_seconds}
    kind = demo_kind(get(protocol.value))
    with _clean_errors():
        for name, value in given.items():
            if value is not None and kind not in DEMO_OPTIONS[name]:
                applies = listed(names(lambda e: e.demo and demo_kind(e) in DEMO_OPTIONS[name]), "and")
                raise ParameterError(name, f"given only for {applies} (it does nothing for {protocol.value})", value)
        concurrency = check_integer("concurrency", 500 if concurrency is None else concurrency, 1, 100_000)
    signal.signal(signal.SIGTERM, _interrupted)  # the services stop with the demo, as on Ctrl-C
    if kind == "heavy hitters":
        _demo_heavy_hitters(protocol.value, users or 20_000, epsilon, delta, concurrency, workdir, as_json)
        return
    if kind == "rounds":
        _demo_sharing(protocol.value, users or 300, drop_fraction or 0.0, epsilon, delta,
                      300.0 if round_seconds is None else round_seconds, workdir, as_json)
        return
    users = 20_000 if users is None else users
    from .demos import run_demo
    from .reports import document_privacy, json_document

    with _clean_errors():
        users = check_integer("users", users, 1_000, 1_000_000)
        vocabulary = check_integer("vocabulary", 1_000 if vocabulary is None else vocabulary, 2, 20_000)
        top = check_integer("top", 10 if top is None else top, 1, vocabulary)
        out = run_demo(workdir, users, vocabulary, epsilon, delta, concurrency,
                       progress=(lambda _text: None) if as_json else _say, protocol=protocol.value)
    if as_json:
        print(json.dumps(json_document({k: out[k] for k in ("service", "simulation", "load", "comparison")},
                                       from_data=True)))  # the seeded simulation evaluated, the comparison
        return
    from rich.table import Table

    sim = {e["item"]: e for e in out["simulation"]["estimates"]}
    service_privacy = document_privacy(out["service"])
    table = Table(title=f"{protocol.value} over {users} users: the services' result ({_label(service_privacy)}) beside "
                        "the simulation")
    for column in ("word", "true count", "service ± stderr", "simulation ± stderr"):
        table.add_column(column, justify="right")
    for e in out["service"]["estimates"][:top]:
        s = sim[e["item"]]
        table.add_row(out["words"][e["item"]], str(out["truth"][e["item"]]), f"{e['estimate']:.1f} ± {e['stderr']:.1f}",
                      f"{s['estimate']:.1f} ± {s['stderr']:.1f}")
    _console().print(table)
    c, load, cmp = out["service"]["collection"], out["load"], out["comparison"]
    _say_release_privacy(service_privacy, "service ", f"; {service_privacy.randomness}; honest fraction "
                         f"{service_privacy.honest_fraction:g}")
    _say(f"simulation privacy: private: {str(out['simulation']['privacy']['private']).lower()} (seeded)")
    _say(f"collection: {c['reports']} reports in {c['batches']} batch(es), {out['service']['messages']['total']} "
         f"messages, {c['unopened'] + c['malformed']} dropped; load: {load['acknowledged']} acknowledged at "
         f"{load['reports_per_second']:.0f} reports/s, latency p50 {load['latency_ms']['p50']:.0f} ms, p99 "
         f"{load['latency_ms']['p99']:.0f} ms")
    verdict = "matches" if cmp["matches"] else "DOES NOT match"
    _say(f"service vs simulation over all {cmp['items']} words: RMS of the standardized differences "
         f"{cmp['rms_standardized_difference']:.2f} (1 expected), largest {cmp['max_standardized_difference']:.2f} "
         f"(about {cmp['expected_max']:.1f} expected): the service {verdict} the simulation within its standard "
         "errors")


def _demo_heavy_hitters(protocol: str, users: int, epsilon: float, delta: float, concurrency: int, workdir: Path,
                        as_json: bool) -> None:
    """demo-service of a heavy-hitter protocol (privagg.demos.run_heavy_hitter_demo), printed."""
    from .demos import run_heavy_hitter_demo
    from .reports import document_privacy, json_document

    with _clean_errors():
        users = check_integer("users", users, 5_000, 1_000_000)
        out = run_heavy_hitter_demo(workdir, users, epsilon=epsilon, delta=delta, concurrency=concurrency,
                                    protocol=protocol,
                                    progress=(lambda _text: None) if as_json else _say)
    if as_json:
        print(json.dumps(json_document(out, from_data=True)))  # the true counts, recall and precision
        return
    from rich.table import Table

    report, comparison = out["service"], out["comparison"]
    simulated = {h["item"] for h in out["simulation"]["heavy_hitters"]}
    table = Table(title=f"{protocol} over {report['n_users']:,} users: the heavy words the services discovered (no "
                        f"list), threshold phi n = {comparison['threshold']:,.0f}")
    for column in ("word", "service ± stderr", "true count", "found by the simulation"):
        table.add_column(column, justify="right")
    for h in report["heavy_hitters"]:
        table.add_row(str(h["item"]), f"{h['estimate']:,.0f} ± {h['stderr']:,.0f}", str(out["truth"].get(h["item"], 0)),
                      "yes" if h["item"] in simulated else "no")
    _console().print(table)
    missed = sorted(w for w, c in out["truth"].items() if c >= comparison["threshold"] and
                    w not in {h["item"] for h in report["heavy_hitters"]})
    for who in ("service", "simulation"):
        e = comparison[who]
        _say(f"{who}: recall {e['recall']:.2f} of the {e['heavy_items']} words held by at least phi n users, precision "
             f"{e['precision']:.2f} of the {e['reported']} reported" + (f" (missed: {', '.join(missed)})"
                                                                          if who == "service" and missed else ""))
    _say_release_privacy(document_privacy(report), "service ", "; the simulation beside it is seeded (not private)")


def _demo_sharing(protocol: str, users: int, drop_fraction: float, epsilon: float, delta: float,
                  round_seconds: float, workdir: Path, as_json: bool) -> None:
    """demo-service of a multi-round protocol (privagg.demos.run_sharing_demo), printed."""
    from .demos import run_sharing_demo
    from .protocols.registry import get
    from .reports import document_privacy, json_document

    with _clean_errors():
        summary = run_sharing_demo(workdir, protocol, users, drop_fraction, epsilon, delta, round_seconds,
                                   progress=(lambda _text: None) if as_json else _say)
    report, rows = summary["service"], summary["estimates"]
    if as_json:
        print(json.dumps(json_document(summary, from_data=True)))  # the truth and z-scores beside the release
        return
    from rich.table import Table

    d, privacy = report["dropouts"], document_privacy(report)
    server = "S2's" if task_service(get(protocol)) == "two-servers" else "the sharing server's"
    table = Table(title=f"{protocol} over {d['survivors']} of {summary['users']} users: {server} release "
                        f"({_label(privacy)}) beside the simulation")
    for column in ("word", "true count", "service ± stderr", "z", "simulation ± stderr", "z"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(r["word"], str(r["truth"]), f"{r['service']:.1f} ± {r['service_stderr']:.1f}",
                      _shown_z(r["service_z"]), f"{r['simulation']:.1f} ± {r['simulation_stderr']:.1f}",
                      _shown_z(r["simulation_z"]))
    _console().print(table)
    _say(f"users: {d['enrolled']} enrolled, {d['round1_senders']} took part in round 1, {d['survivors']} in the "
         f"release (the task's minimum {d['min_survivors']})")
    _say_release_privacy(privacy, "service ", f"; recomputed for the {d['survivors']} survivors; simulation: not "
                         "private (seeded)")
    z = [r["service_z"] for r in rows if r["service_z"] is not None]
    if summary["data_condition_broken"]:
        _say("warning: the survivors' data breaks the condition the guarantee assumes (a demo can see it; no party "
             f"of a deployment can): {summary['data_condition_broken']}", stderr=True)
    for caveat in privacy.caveats:
        if "weakened" in caveat:
            _say("warning: " + caveat[caveat.index("the dropouts weakened"):], stderr=True)
    if summary["z_rms"] is not None:
        _say(f"z-scores against the truth (each over its standard deviation at the true count): RMS "
             f"{summary['z_rms']:.2f} over {len(z)} categories (1 expected)")
    _say("rounds: " + ", ".join(f"{k} {v:.1f} s" for k, v in summary["round_seconds"].items()))
    b = summary["bytes"]
    formula = "" if b.get("sealed_expected") is None else (
        f", the formula {b['sealed_expected']:,} ("
        f"{'equal' if b['sealed_sent'] == b['sealed_expected'] else 'DIFFERENT'})")
    _say(f"bytes: the users sealed {b['sealed_sent']:,} bytes for the relay{formula}; HTTP bodies (base64 and JSON) "
         f"{b['http_sent']:,} sent, {b['http_received']:,} received")
    parties = Table(title="messages per party (entries: field elements; items in report sets and helper lists; a key "
                          "counts one, a backup one per secret, a revealed share one), measured / expected, beside "
                          "Table I")
    for column in ("party", "parties", "sent", "received", "Table I"):
        parties.add_column(column, justify="left" if column in ("party", "Table I") else "right")
    for row in summary["parties"]:
        parties.add_row(row["party"], str(row["parties"]), _entries(row["sent"], row["expected_sent"]),
                        _entries(row["received"], row["expected_received"]), row["table_i"])
    _console().print(parties)


def _entries(measured: dict, expected: dict) -> str:
    """Each kind's entries per party, measured / expected."""
    return "\n".join(f"{kind}: {measured.get(kind, 0):,.1f} / {expected[kind]:,.1f}" if kind in expected else
                     f"{kind}: {measured.get(kind, 0):,.1f}" for kind in sorted({*measured, *expected})) or "-"


def _shown_z(z: float | None) -> str:
    return "-" if z is None else f"{z:+.2f}"


def add_service_commands(app: typer.Typer) -> None:
    app.command()(serve)
    app.add_typer(task_app, name="task")
    app.add_typer(tokens_app, name="tokens")
    app.add_typer(keys_app, name="keys")
    app.add_typer(db_app, name="db")
    app.command()(submit)
    app.command()(loadgen)
    app.command()(result)
    app.command("demo-service")(demo_service)
