"""The tasks' operators: ``privagg task create|candidates|close``, ``privagg tokens issue`` and ``privagg budget
show|set`` (the privacy budget across tasks: service/ledger.py), in the database of the service that holds the task
(by its protocol's topology); and the organisation of the multi-round tasks (:mod:`privagg.service.organisation`):
``privagg organisation keygen``, ``task create --organisation-key`` (it signs the task) and ``privagg roster sign``
(it checks each enrollment against its tokens and signs the roster, which opens the rounds), run where the
organisation's key is, against the server's database."""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from ..errors import ParameterError, check_integer
from .output import _check_output, _clean_errors, _say
from .servers import _DB, _KEK_FILE, _NEW_DB


task_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Tasks of the analyzer service.")


tokens_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="One-use client tokens of the collector.")


organisation_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The organisation of dpds, dpdg and "
                               "tss tasks: the signing key its users' devices pin.")


roster_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The organisation's signed roster of a dpds, "
                         "dpdg or tss task.")


budget_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The privacy budget across tasks: a ledger "
                         "per population and calendar period (UTC) in the database of the service that creates the "
                         "tasks (analyzer, sharing, s1).")


TokenServer = Enum("TokenServer", {name: name for name in ("collector", "sharing", "s1")}, type=str)


def task_service(entry) -> str:
    """Which service holds a task of ``entry``'s protocol, by its topology: the sharing server, TSS's two servers,
    or the analyzer (a one-round task; the analyzer refuses one it does not run)."""
    from ..protocols.kinds import Topology

    return {Topology.SECRET_SHARING: "sharing", Topology.TWO_SERVERS: "two-servers"}.get(entry.topology, "analyzer")


def _tasks_of(services: tuple[str, ...]) -> str:
    """The protocols whose tasks ``services`` hold, as prose."""
    from ..protocols.registry import listed, names

    return listed(names(lambda e: task_service(e) in services))


_ONE_ROUND = (("analyzer",), lambda: f"a one-round task (the analyzer's: not {_tasks_of(('sharing', 'two-servers'))})")


_ROUND_TASKS = (("sharing", "two-servers"), lambda: f"a {_tasks_of(('sharing', 'two-servers'))} task")


_TSS = (("two-servers",), lambda: f"a {_tasks_of(('two-servers',))} task (S1 and S2)")


TASK_OPTIONS = {"--min-batch-size": _ONE_ROUND, "--key-id": _ONE_ROUND, "--kem": _ONE_ROUND, "--candidates": _ONE_ROUND,
                "--discover-phi": _ONE_ROUND, "--round-seconds": _ROUND_TASKS, "--min-survivors": _ROUND_TASKS,
                "--kek-file": (("analyzer", "two-servers"), lambda: f"a task of the analyzer, or of "
                               f"{_tasks_of(('two-servers',))} (S2's key)"),
                "--organisation-key": _ROUND_TASKS,
                **dict.fromkeys(("--second-db", "--second-url", "--s2", "--second-task", "--relay-token-file",
                                 "--organisation-public-key"), _TSS)}


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
                organisation_key: Optional[Path] = typer.Option(None, "--organisation-key", help="dpds, dpdg, tss "
                                                                "(S1's task), required: the organisation's key file "
                                                                "(privagg organisation keygen), which signs the task; "
                                                                "its users' devices pin its public key and refuse a "
                                                                "task it did not sign."),
                organisation_public: Optional[str] = typer.Option(None, "--organisation-public-key", help="tss, "
                                                                  "S2's operator (--s2), required: the organisation's "
                                                                  "public key (base64, as organisation keygen prints "
                                                                  "it), under which S2 checks S1's hand-over."),
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
                population: str = typer.Option("default", "--population", help="The devices the task's tokens "
                                               "are issued to: its guarantee is charged to this population's ledger "
                                               "(privagg budget), and the task refused if it would exceed its "
                                               "budget."),
                as_json: bool = typer.Option(False, "--json", help="Print the task's JSON.")) -> None:
    """Create a task: in the analyzer's database for a one-round protocol (a new HPKE key pair and the frozen
    parameters), in the sharing server's for dpds and dpdg (their users bring their own keys), in S2's and S1's for
    tss and tss-collusion (S2's key pair, and the relay token S1 hands over with)."""
    from ..io import read_json_text
    from ..protocols.registry import get, load_parameters
    from ..service.calls import check_url
    from ..service.config import load_config
    from ..service.ledger import BudgetExceeded, check_charge, check_population, round_cost
    from ..service.storage import connect, lock_timeouts_refused

    with _clean_errors(), lock_timeouts_refused(db):
        check_population(population)
        text = read_json_text(params, "params")
        _one_report_a_user(text)
        parameters = load_parameters(text)
        if second_url is not None:
            second_url = check_url("second-url", second_url)
        given = {"--min-batch-size": min_batch_size, "--key-id": key_id, "--kem": kem, "--candidates": candidates,
                 "--discover-phi": discover_phi, "--round-seconds": round_seconds, "--min-survivors": min_survivors,
                 "--kek-file": kek_file, "--second-db": second_db, "--second-url": second_url,
                 "--s2": only_second or None, "--second-task": second_task, "--relay-token-file": relay_token_file,
                 "--organisation-key": organisation_key, "--organisation-public-key": organisation_public}
        service = task_service(get(parameters.protocol))  # the registry entry's topology picks the service
        for name, value in given.items():  # refused, not ignored, where it does nothing
            if value is not None and service not in TASK_OPTIONS[name][0]:
                raise ParameterError(name, f"given only for {TASK_OPTIONS[name][1]()}", parameters.protocol)
        if round_seconds is not None:
            from ..service.round_tasks import check_round_deadline

            check_round_deadline(round_seconds)
        round_seconds = 3600.0 if round_seconds is None else round_seconds
        organisation = None if service == "analyzer" or only_second else _organisation(organisation_key)
        if organisation_public is not None and not only_second:
            raise ParameterError("organisation-public-key", "given only with --s2 (S2's operator; S1's and a single "
                                 "operator give --organisation-key)", "without --s2")
        if only_second and organisation_key is not None:
            raise ParameterError("organisation-key", "given to S1's operator (--second-task): the organisation signs "
                                 "the task users fetch from S1, S2's key in it", "with --s2")
        if service == "two-servers":
            from ..service.keys import KeyEncryptionKey
            from ..service.two_servers.servers import FirstService, SecondService, create_tasks

            if only_second:  # S2's operator: S2's task, its public JSON out, the relay token to a private file
                if organisation_public is None:
                    raise ParameterError.required("organisation-public-key", "with --s2: the organisation's public "
                                                  "key (base64, from privagg organisation keygen), under which S2 "
                                                  "checks S1's hand-over")
                from ..core.identity import public_text

                pinned = public_text(organisation_public, "organisation-public-key")
                if relay_token_file is None:
                    raise ParameterError("relay-token-file", "given with --s2: the new file S2's relay token is "
                                         "written to, for S1's operator", None)
                cfg = load_config("s2", db=db, kek_file=None if kek_file is None else str(kek_file))
                kek = KeyEncryptionKey.load(cfg.kek_file)
                second, token = SecondService(connect(cfg.db, "s2", kek=kek), kek=kek).create_task(
                    parameters, min_survivors, organisation_key=pinned)
                _write_private(relay_token_file, token + "\n")
                delta = _release_delta(parameters, second.min_survivors, as_json)
                print(json.dumps({**second.to_dict(), **delta}) if as_json else second.task_id)
                return
            if second_task is not None:  # S1's operator: S2's public task and relay token, from S2's operator
                if second_url is None:
                    raise ParameterError("second-url", "given with --second-task: where S1 hands over to S2", None)
                second, token = _second_task(second_task, parameters), _relay_token(relay_token_file)
                if min_survivors is not None and min_survivors != second.min_survivors:  # S2's task holds it
                    raise ParameterError("min-survivors", f"left out with --second-task, or S2's task's own "
                                         f"{second.min_survivors} (set by S2's operator: S1's task takes it)",
                                         min_survivors)
                if second.organisation_key != organisation.public_key:
                    raise ParameterError("second-task", "S2's task made with this organisation's public key "
                                         "(--organisation-public-key at S2: S2 checks the hand-over under it)",
                                         "another key" if second.organisation_key else "none")
                first_cfg = load_config("s1", db=db)
                first = FirstService(connect(first_cfg.db, "s1"))
                first.population = population
                try:
                    tss = first.create_task(parameters, second, second_url, token, round_seconds)
                except BudgetExceeded as err:  # S2's task exists already: withdrawn, so nothing is left behind
                    raise _second_withdrawn(err, second_url, second.task_id, token, first_cfg.second_ca) from None
            else:
                if second_db is None or second_url is None:
                    raise ParameterError("second-db/second-url", "both given for tss from one operator (S2's "
                                         "database and URL), or --s2 and then --second-task across two",
                                         f"{second_db}, {second_url}")
                first = FirstService(connect(load_config("s1", db=db).db, "s1"))
                first.population = population
                try:  # before S2's task (create_tasks withdraws it if S1 still refuses: a task charged meanwhile)
                    check_charge(first.engine, population, parameters.protocol, round_cost(
                        parameters, parameters.n_users if min_survivors is None else min_survivors))
                except BudgetExceeded as err:
                    err.args = (f"{err}; no task was made on S1 or S2",)
                    raise
                cfg = load_config("s2", db=second_db, kek_file=None if kek_file is None else str(kek_file))
                kek = KeyEncryptionKey.load(cfg.kek_file)
                second = SecondService(connect(cfg.db, "s2", kek=kek), kek=kek)
                tss = create_tasks(first, second, parameters, second_url, round_seconds, min_survivors,
                                   organisation_key=organisation.public_key)
            organisation.sign_task(first, tss)
            if not as_json:
                _say(f"task {tss.task_id} at S1 (S2's task {tss.second_task_id}): {parameters.protocol}, n = "
                     f"{parameters.n_users} users to enroll, rounds of {tss.round_seconds:g} s, at least "
                     f"{tss.min_survivors} survivors")
            delta = _release_delta(parameters, tss.min_survivors, as_json)
            print(json.dumps({**tss.to_dict(), **delta, **_signed_by(organisation)}) if as_json else tss.task_id)
            return
        if service == "sharing":
            from ..service.sharing.server import SharingService

            sharing = SharingService(connect(load_config("sharing", db=db).db, "sharing"))
            sharing.population = population
            task = sharing.create_task(parameters, round_seconds, min_survivors)
            organisation.sign_task(sharing, task)
            if not as_json:
                _say(f"task {task.task_id}: {parameters.protocol}, n = {parameters.n_users} users to enroll, "
                     f"rounds of {task.round_seconds:g} s, at least {task.min_survivors} survivors")
            delta = _release_delta(parameters, task.min_survivors, as_json)
            print(json.dumps({**task.to_dict(), **delta, **_signed_by(organisation)}) if as_json else task.task_id)
            return
        from ..service.shuffle.analyzer import AnalyzerService
        from ..service.keys import KeyEncryptionKey

        cfg = load_config("analyzer", db=db, kek_file=None if kek_file is None else str(kek_file))
        kek = KeyEncryptionKey.load(cfg.kek_file)
        task = AnalyzerService(connect(cfg.db, "analyzer", kek=kek), kek=kek).create_task(
            parameters, min_batch_size, key_id, kem or "x25519",
            None if candidates is None else _candidate_lines(candidates), discover_phi, population)
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


def _organisation(path: Path | None):
    """The organisation whose key file ``--organisation-key`` names (required for a task with rounds)."""
    from ..service.organisation import Organisation

    if path is None:
        raise ParameterError.required("organisation-key", "for a dpds, dpdg or tss task: the organisation's key file "
                                      "(privagg organisation keygen --output FILE), which signs the task")
    return Organisation(_read_key(path))


def _signed_by(organisation) -> dict:
    """A task's JSON fields of the organisation that signed it: its public key, the one its devices pin."""
    import base64

    return {"organisation_key": base64.b64encode(organisation.public_key).decode()}


def _release_delta(parameters, min_survivors: int, as_json: bool) -> dict:
    """A task with rounds (dpds, dpdg, tss): the delta its release states over its fewest survivors, the worst case
    (:func:`~privagg.service.round_tasks.release_delta`), said (unless ``as_json``), and a warning when it exceeds the
    task's target, naming the --min-survivors that keeps it; the JSON fields of both."""
    from ..service.round_tasks import release_delta, survivors_for_target

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
    """``text`` to a new file readable by its owner only, from its creation on (an existing file is refused, never
    overwritten): a relay token, tokens, the organisation's key."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as err:
        raise ParameterError(field, "a new file in a writable folder (an existing one is never overwritten)",
                             f"{path} ({err.strerror})") from None
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _read_key(path: Path, field: str = "organisation-key") -> bytes:
    """The organisation's private key from the file ``organisation keygen`` wrote (base64 of 32 bytes, one line); a
    ParameterError naming ``field`` otherwise."""
    import base64
    import binascii

    from ..core.identity import KEY_BYTES

    _owner_only(path, field)
    try:
        raw = base64.b64decode(path.read_text(encoding="ascii").strip(), validate=True)
    except (OSError, UnicodeDecodeError, binascii.Error, ValueError) as err:
        raw = getattr(err, "strerror", None) or "not base64 text"
    if not isinstance(raw, bytes) or len(raw) != KEY_BYTES:
        raise ParameterError(field, "a key file privagg organisation keygen wrote (base64 of 32 bytes)",
                             f"{path} ({raw if isinstance(raw, str) else f'{len(raw)} bytes'})")
    return raw


def _second_withdrawn(err: ParameterError, url: str, second_id: str, token: str, ca_file: str | None):
    """S1's refusal ``err`` of a task whose S2 task S2's operator made (two operators), once S2's task is withdrawn
    over S2's route with the relay token, saying what is left."""
    from ..service.two_servers.servers import withdraw_second

    try:
        withdraw_second(url, second_id, token, ca_file=ca_file)
        left = f"S2's task {second_id} was withdrawn: nothing is left on either server"
    except Exception as failure:  # S2 away or refusing: the task stays there, which no user reaches without S1's
        why = getattr(failure, "detail", None) or f"{type(failure).__name__}: {failure}"
        left = f"S2's task {second_id} is left at S2, unused (withdrawing it failed: {why[:160]})"
    err.args = (f"{err}; {left}",)
    return err


def _second_task(path: Path, parameters):
    """S2's public task from the JSON file S2's operator gave, checked: its parameters must be these."""
    from ..service.round_tasks import SecondTask

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


def _owner_only(path: Path, field: str) -> None:
    """A secret's file that other users cannot read or write, as the KEK's must be (a reviewer's finding: the
    organisation's key at mode 0644, which lets whoever reads it sign rosters, was taken without a word)."""
    import stat

    try:
        mode = path.stat().st_mode
    except OSError:
        return  # the read that follows says why
    if stat.S_ISREG(mode) and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ParameterError(field, "a file only its owner may read or write (chmod 600)",
                             f"{path}, mode {stat.S_IMODE(mode):o}")


def _relay_token(path: Path | None) -> str:
    if path is None:
        raise ParameterError("relay-token-file", "given with --second-task: the file with S2's relay token", None)
    _owner_only(path, "relay-token-file")
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise ParameterError("relay-token-file", "a readable file with S2's relay token (ASCII)",
                             f"{path} ({getattr(err, 'strerror', None) or err.reason})") from None


def _candidate_lines(path: Path) -> list:
    """The items of a candidates file, one a line: all integers, or all text. A file of more lines than a task
    takes is refused as soon as its first line too many is read."""
    from ..service.shuffle.analyzer import MAX_CANDIDATES

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
    from ..service.shuffle.analyzer import AnalyzerService
    from ..service.config import load_config
    from ..service.keys import KeyEncryptionKey
    from ..service.storage import connect, lock_timeouts_refused
    from ..service.web import Refused

    with _clean_errors(), lock_timeouts_refused(db):
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
    from ..service.shuffle.collector import Collector
    from ..service.config import load_config
    from ..service.storage import connect, lock_timeouts_refused
    from ..service.tasks import is_hex_id

    with _clean_errors(), lock_timeouts_refused(db):
        if not is_hex_id(task):
            raise ParameterError("task", "a task id (32 lowercase hexadecimal characters, the whole id)", task)
        engine = connect(load_config("collector", db=db).db, "collector", create=False)
        waiting, before = Collector(engine, None, None).close(task)
    last = f"; its {waiting} waiting reports form its last batch" if waiting else ""
    _say({None: f"closed task {task}: no report is taken after{last}",
          "closed": f"task {task} was already closed (nothing changed): no report is taken after{last}",
          "released": f"task {task} already took no report (nothing changed): its one batch was formed (the "
                      "collector hands it to the analyzer until the analyzer takes it: privagg result says when)"
          }[before])


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
    """Issue one-use client tokens for a task of the server (it keeps only their hashes: for a sharing or s1 task,
    of each one's authentication half). The task must exist: the sharing server and S1 hold theirs; the collector
    learns a task from the analyzer (--analyzer), once. A sharing or s1 task's tokens are the organisation's to keep:
    privagg roster sign checks the users' enrollments with them."""
    from ..service.config import load_config
    from ..service.storage import connect, lock_timeouts_refused
    from ..service.tasks import is_hex_id

    with _clean_errors(), lock_timeouts_refused(db):
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
        if server.value in ("sharing", "s1"):
            if server.value == "sharing":
                from ..service.sharing.server import SharingService as Driver
            else:
                from ..service.two_servers.servers import FirstService as Driver
            driver = Driver(engine)
            issued = driver.issue_tokens(task, count)
            total, n = driver.users.issued(task), driver.task(task).parameters.n_users
            if total > n:  # a reviewer's finding: a stale token took a seat, and a user was refused 409 roster_full
                _say(f"warning: task {task} has {total} tokens for its n = {n} seats: whoever enrolls first takes a "
                     "seat, so a token kept by someone else can leave a user out; keep at most n of them out",
                     stderr=True)
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

    from ..service.calls import check_service
    from ..service.shuffle.collector import Collector, http_peer
    from ..service.web import Refused

    fetch = None if cfg.analyzer_url is None else http_peer(check_service("analyzer", cfg.analyzer_url, "analyzer"),
                                                            ca_file=cfg.analyzer_ca)[0]
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


BudgetServer = Enum("BudgetServer", {name: name for name in ("analyzer", "sharing", "s1")}, type=str)
_BUDGET_SERVER = typer.Option("analyzer", "--server", help="The service whose tasks the budget pays for: analyzer "
                              "(one-round tasks), sharing (dpds, dpdg) or s1 (tss).")


def _ledger_engine(server: str, db: str | None):
    from ..service.config import load_config
    from ..service.storage import a_role, connect

    try:
        return connect(load_config(server, db=db).db, server, create=False)
    except ParameterError as err:  # another party's database with a ledger: say which --server reads it
        other = next((r for r in ("analyzer", "sharing", "s1") if r != server and
                      str(err.got).endswith(f", {a_role(r)} database")), None)
        if other is None:
            raise
        raise ParameterError(err.field, err.accepted, f"{err.got} (its ledger: --server {other})") from None


def _one_report_a_user(text: str) -> None:
    """Refuse a calibrate report made with --max-items L > 1 (its privacy block's event composed over L reports):
    its parameters are one report's (epsilon / L or its PLD share, n L reports), which a task would state as each
    user's guarantee and a population's budget charge, about L times too little (a reviewer's finding); the
    services take one report a user."""
    try:
        data = json.loads(text)
    except ValueError:
        return  # load_parameters says why
    event = data.get("privacy", {}).get("event", {}) if isinstance(data, dict) and isinstance(
        data.get("privacy"), dict) else {}
    if isinstance(event, dict) and event.get("type") == "composed":
        raise ParameterError("params", "parameters of one report a user (a calibrate report without --max-items: "
                             "a task takes one report from each of its n users)", f"a calibrate report of users "
                             f"holding up to L = {event.get('reports')} items, each report a share of their "
                             "guarantee (a task and its budget would state and charge one report's)")


@budget_app.command("show")
def budget_show(server: BudgetServer = _BUDGET_SERVER, db: Optional[str] = _DB,  # type: ignore[valid-type]
                as_json: bool = typer.Option(False, "--json", help="Print the ledgers as JSON.")) -> None:
    """Each population's budget, what its current period (UTC) spent and how it was composed (dp-accounting's PLD
    where the tasks' mechanisms allow, else basic composition), and what is left."""
    from ..service.ledger import ledgers, show
    from ..service.storage import reading

    with _clean_errors():
        with reading(_ledger_engine(server.value, db)) as c:
            found = ledgers(c)
    if as_json:
        print(json.dumps([ledger.to_dict() for ledger in found], indent=2))
        return
    for ledger in found:
        print(show(ledger))
    if not found:
        _say("no population has a budget or a task yet")


@budget_app.command("set")
def budget_set(population: str = typer.Option("default", "--population", help="The population (privagg task "
                                              "create --population)."),
               epsilon: float = typer.Option(..., "--epsilon", help="Epsilon per period, > 0."),
               delta: float = typer.Option(..., "--delta", help="Delta per period, in [0, 1)."),
               period: str = typer.Option("day", "--period", help="day, week (ISO, from Monday) or month: calendar "
                                          "periods in UTC."),
               server: BudgetServer = _BUDGET_SERVER, db: Optional[str] = _DB) -> None:  # type: ignore[valid-type]
    """Set a population's budget: from now on a task whose guarantee, composed with what its period spent, would
    exceed it is refused at creation."""
    from ..service.ledger import set_budget, show
    from ..service.storage import lock_timeouts_refused

    with _clean_errors(), lock_timeouts_refused(db):
        ledger = set_budget(_ledger_engine(server.value, db), population, epsilon, delta, period)
    print(show(ledger))
    left = ledger.remaining
    if left[0] < 0 or left[1] < 0:
        _say(f"warning: {ledger.label} already spent more than this budget: no task of {population} is created until "
             "the next period", stderr=True)


@organisation_app.command("keygen")
def organisation_keygen(output: Path = typer.Option(..., "--output", help="The new key file (mode 0600; an existing "
                                                    "file is never overwritten). Keep it off the servers.")) -> None:
    """Make the organisation's Ed25519 key: its private half to FILE, its public half printed (base64), for every
    device of its tasks to pin, with its enrollment token."""
    import base64

    from ..core import identity

    with _clean_errors():
        private = identity.generate()
        _write_private(output, base64.b64encode(private).decode() + "\n", "output")
    _say(f"the organisation's key is in {output}; its public key (below) is what its users' devices pin", stderr=True)
    print(base64.b64encode(identity.public_key(private)).decode())


RosterServer = Enum("RosterServer", {name: name for name in ("sharing", "s1")}, type=str)


@roster_app.command("sign")
def roster_sign(task: str = typer.Option(..., "--task", help="The task id."),
                tokens: Path = typer.Option(..., "--tokens", help="The task's tokens, one a line, as tokens issue "
                                            "wrote them."),
                organisation_key: Path = typer.Option(..., "--organisation-key", help="The organisation's key file "
                                                      "(the one that signed the task)."),
                db: Optional[str] = _DB,
                server: RosterServer = typer.Option("sharing", "--server", help="sharing (a dpds or dpdg task) or "  # type: ignore[valid-type]
                                                    "s1 (a tss task)."),
                without_unenrolled: bool = typer.Option(False, "--without-unenrolled", help="Sign though not every "
                                                        "user enrolled: those who did not are left out, dropouts of "
                                                        "round 1 (else the task waits for them).")) -> None:
    """Once every user enrolled (or with --without-unenrolled, those who did): check each enrollment's binding with
    the token he enrolled with, sign the roster of those that check (index, identity key, X25519 key) and give it to
    the server, which publishes it and opens the rounds. A user whose binding does not check (keys his device did
    not enroll) or whose token is not in --tokens is named and left out: a dropout of round 1. Running it again
    changes nothing."""
    from ..service.config import load_config
    from ..service.organisation import Organisation
    from ..service.storage import connect
    from ..service.tasks import is_hex_id

    with _clean_errors():
        if not is_hex_id(task):
            raise ParameterError("task", "a task id (32 lowercase hexadecimal characters)", task)
        organisation = Organisation(_read_key(organisation_key))
        issued = _token_lines(tokens)
        engine = connect(load_config(server.value, db=db).db, server.value, create=False)
        if server.value == "sharing":
            from ..service.sharing.server import SharingService

            driver = SharingService(engine)
        else:
            from ..service.two_servers.servers import FirstService

            driver = FirstService(engine)
        try:
            signed, left_out = organisation.sign_roster(driver, task, issued, without_unenrolled)
            state = driver.state(task)["state"]
        finally:
            engine.dispose()
    for user, why in sorted(left_out.items()):
        _say(f"warning: user {user} is left out of the roster (a dropout of round 1): {why}", stderr=True)
    _say(f"task {task}: the roster of {len(signed.users)} users is signed and published; the task is in {state}")


def _token_lines(path: Path) -> list[str]:
    try:
        lines = [line.strip() for line in path.read_text(encoding="ascii").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as err:
        raise ParameterError("tokens", "a readable file of the task's tokens, one a line (tokens issue --output)",
                             f"{path} ({getattr(err, 'strerror', None) or err.reason})") from None
    if not lines:
        raise ParameterError("tokens", "a file of the task's tokens, one a line", f"{path} (empty)")
    return lines
