"""``privagg estimate PROTOCOL``: a protocol simulated over a dataset (a frequency table, vector sums or heavy
hitters), one command per implemented protocol generated from its registry entry, with the protocol's own
options."""

from __future__ import annotations

import inspect
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import typer
from typer.models import CommandInfo

from ..errors import ParameterError
from ..protocols.kinds import Family, ResultKind
from .inputs import (PUBLIC_CANDIDATES, _check_public, _check_stdin_format, _input_file, _input_name,
                     _input_parameters, _located, _read_input, _read_vector_input, _category_encoder,
                     _small_domain_encoder, DEFAULT_DOMAIN)
from .options import (MissingChoice, Mode, ProtocolCommands, _command, _hash_key_option, _param,
                      _protocol_parameters, _verbose_option)
from .output import (_check_output, _clean_errors, _count, _emit, _estimate_table, _item_cell, _progress, _say,
                     _say_privacy, _table, _titled)

if TYPE_CHECKING:
    from ..protocols.registry import ProtocolEntry


def _register(entry: ProtocolEntry) -> None:
    """An implemented protocol's estimate command, by what it estimates; its options are made when it is
    (:class:`_MadeWhenRead`)."""
    if entry.result is ResultKind.HEAVY_HITTER_LIST:
        make, what = _hh_estimate_command, "simulate over users' items, report the heavy hitters (discovered, no " \
                                           "candidate list)."
    elif entry.result is ResultKind.FREQUENCY_TABLE:
        make, what = _estimate_command, "simulate over a dataset, report the top items."
    else:  # vector sums: estimated over vectors or (coordinate, weight) rows
        make, what = _vector_estimate_command, "simulate over users' vectors, report the sums."
    estimate_app.command(entry.name, help=f"{entry.title}: {what}")(None)
    estimate_app.registered_commands.append(_MadeWhenRead(estimate_app.registered_commands.pop(),
                                                          lambda: make(entry)))


class _MadeWhenRead(CommandInfo):
    """A command as typer registers it (name, help, settings), its function -- behind some 25 options read from
    the protocol's entry -- made when first read: ``privagg estimate olh`` makes olh's alone, not the twenty
    (7-13 ms of the command on a 2-core EPYC), and ``privagg estimate --help`` lists them by name and help."""

    def __init__(self, info: CommandInfo, make: Callable[[], Callable[..., None]]) -> None:
        vars(self).update({k: v for k, v in vars(info).items() if k != "callback"}, _callback=None, _make=make)

    @property
    def callback(self) -> Callable[..., None]:
        if self._callback is None:
            self._callback = self._make()
        return self._callback

    @callback.setter
    def callback(self, value: Callable[..., None] | None) -> None:
        self._callback = value


estimate_app = ProtocolCommands(_register, help="Simulate a protocol over a dataset and report the top items.")


def _seed_and_evaluate_options() -> list[inspect.Parameter]:
    """--seed and --evaluate, which every estimate command shares."""
    return [
        _param("seed", Optional[int], typer.Option(
            None, "--seed", help="Seed a reproducible simulation (not private: the report says so).")),
        _param("evaluate", Optional[bool], typer.Option(
            None, "--evaluate/--no-evaluate", help="Put the true counts (or sums) and the realised error, computed "
                                                   "from the raw data, beside the estimates: the report is then an "
                                                   "evaluation, marked not private. Default: on for the bundled "
                                                   "datasets and seeded runs, off for a --input file run with "
                                                   "secure randomness (a report to publish).")),
    ]


def _evaluating(evaluate: bool | None, input: Path | None, seed: int | None) -> bool:
    """--evaluate as given, else on for the bundled data (``input`` None) and seeded runs."""
    return (input is None or seed is not None) if evaluate is None else evaluate


def _messages_info(report, **info: Any) -> dict[str, Any]:
    """items.json of a message folder written by estimate: ``info`` and whether the run was private (and if not,
    why: analyze says so)."""
    privacy = report.privacy
    return {**info, "private": privacy.private,
            **({} if privacy.private else {"not_private": privacy.not_private_reason})}


def _user_options(vectors: bool) -> list[inspect.Parameter]:
    """--user-column and the bounding of a user's rows: --max-items (items) or --max-rows (vectors)."""
    return [
        _param("user_column", Optional[str], typer.Option(
            None, "--user-column", help="The table's column naming each row's user (an event log, any number of rows "
                                        "a user): the user is then the privacy unit, his rows bounded before "
                                        "randomizing (docs/privacy.md, \"Many rows a user\"); CSV, TSV or Parquet.")),
        _param("max_rows", Optional[int], typer.Option(
            None, "--max-rows", help="With --user-column: R of each user's rows sampled at random, R reports a user "
                                     "(the guarantee composes over them); default: a user's rows summed and clipped "
                                     "to [0, 1]^d (sparse: one coordinate a user).")) if vectors else
        _param("max_items", int, typer.Option(
            1, "--max-items", help="With --user-column: L distinct items a user, chosen at random; the guarantee "
                                   "(--epsilon, --delta: the user's) composes over his L reports (privagg calibrate "
                                   "--max-items shows the error first)."))]


# the library's argument names, as the command line spells them
CLI_FIELDS = {"max_items": "max-items", "max_rows": "max-rows", "user": "user-column", "item": "column",
              "data": "input", "domain_size": "domain", "max_length": "max-length"}


def _by_user(entry: ProtocolEntry, input: Optional[Path], user_column: Optional[str], fmt, candidates: Optional[Path],
             refused: dict[str, Any], **run: Any):
    """The report of a run with --user-column (or --max-items/--max-rows, which need it): the library's
    :func:`privagg.simulate.frames.estimate` over the file, its errors naming the command line's options."""
    from ..io import read_list
    from ..simulate.frames import estimate

    if user_column is None:
        bounding = {k: v for k, v in run.items() if k in ("max_items", "max_rows") and v not in (None, 1)}
        name, value = next(iter(bounding.items()))
        raise ParameterError(CLI_FIELDS[name], "left out without --user-column (one row a user)", value)
    if input is None:
        raise ParameterError("user-column", "given with --input (a table with a column of users)", user_column)
    for name, value in refused.items():
        if value is not None:
            raise ParameterError(name, "left out with --user-column", value)
    listed = None if candidates is None else read_list(candidates)
    try:
        return estimate(input, entry.name, user=user_column, item_type=fmt.item_type, missing=fmt.missing,
                        delimiter=fmt.delimiter, header=fmt.header, candidates=listed, **run)
    except ParameterError as err:
        field = CLI_FIELDS.get(err.field)
        if field is None:
            raise
        renamed = ParameterError(field, err.accepted, err.got)
        renamed.args = (field + str(err)[len(err.field):],)
        raise renamed from None


def _estimate(entry: ProtocolEntry, *, input: Optional[Path], column: Optional[str], item_type: Enum,
              delimiter: Optional[str], header: bool, missing: Enum, domain: int, epsilon: float,
              delta: float, calibration: Enum, candidates: Optional[Path], top: int, seed: Optional[int],
              evaluate: Optional[bool],
              full_domain: Optional[bool], mode: Mode, verbose: bool, as_json: bool,
              output: Optional[Path], progress: Optional[bool], write_messages: Optional[Path], partitions: int,
              epsilon_column: Optional[str], user_column: Optional[str], max_items: int,
              hash_key: Optional[str] = None, **options: Any) -> None:
    from ..io import InputFormat
    from ..pipelines import with_left_out
    from ..reports import report_document
    from ..simulate.frequency import check_resources, estimate_frequencies, item_encoder

    with _clean_errors():
        _check_output(output, input, candidates)
        _check_public(candidates, input)
        _check_stdin_format(input, delimiter)
        fmt = InputFormat(item_type.value, column, delimiter, header, missing.value)
        if user_column is not None or max_items != 1:
            report = _by_user(entry, input, user_column, fmt, candidates, {
                "write-messages": write_messages, "epsilon-column": epsilon_column}, item=column, max_items=max_items,
                epsilon=epsilon, delta=delta, calibration=calibration.value, domain_size=domain, top=top, seed=seed,
                evaluate=_evaluating(evaluate, input, seed), hash_key=hash_key, full_domain=full_domain,
                mode=mode.value, **options)
            _emit(report_document(report), as_json, output, lambda: _print_estimate(report, verbose))
            return
        if entry.categorical:  # categories are codes by their place in the public list: no --hash-key
            encoder = _category_encoder(input, candidates, domain, item_type.value)
            domain = encoder.domain_size
        elif domain is None and entry.small_domain:
            encoder = _small_domain_encoder(entry, input, hash_key)
            domain = encoder.domain_size
        else:
            domain = DEFAULT_DOMAIN if domain is None else domain
            encoder = item_encoder(domain, hash_key, seed)
        if write_messages is not None:
            if mode is Mode.fast:
                raise ParameterError("write-messages", "left out with --mode fast (the fast path makes no messages; "
                                     "--mode faithful writes them)",
                                     str(write_messages))
            from ..engine import prepare_message_folder

            prepare_message_folder(write_messages, partitions)
        if input is not None:  # refuse a run that cannot fit before reading a line
            check_resources(entry.name, input, fmt, epsilon=epsilon, delta=delta, domain_size=domain,
                            calibration=calibration.value, options=options, mode=mode.value,
                            full_domain=full_domain, candidates=candidates is not None)
        start = time.perf_counter()
        codes, candidate_codes, dropped, input_name = _read_input(entry, input, fmt, encoder, candidates)
        read_seconds = time.perf_counter() - start
        evaluate = _evaluating(evaluate, input, seed)
        if epsilon_column is not None:
            from ..io import read_epsilons
            from ..simulate.frequency import estimate_weighted

            if input is None:
                raise ParameterError("epsilon-column", "given with --input (a table with a column of epsilons)",
                                     epsilon_column)
            with _progress(progress) as advance:
                report, _ = estimate_weighted(
                    entry.name, codes, read_epsilons(input, fmt, epsilon_column), encoder, epsilon=epsilon, delta=delta,
                    calibration=calibration.value, options=options, top=top, mode=mode.value, seed=seed,
                    input_name=input_name, progress=advance, evaluate=evaluate)
            report.simulation.seconds["read"] = read_seconds
            with_left_out(report, dropped)
            _emit(report_document(report), as_json, output, lambda: _print_estimate(report, verbose))
            return
        with _progress(progress) as advance:
            report, run = estimate_frequencies(
                entry.name, codes, encoder, epsilon=epsilon, delta=delta, calibration=calibration.value,
                options=options, candidate_codes=candidate_codes, top=top, full_domain=full_domain,
                mode=mode.value, seed=seed, keep_messages=write_messages is not None, input_name=input_name,
                progress=advance, evaluate=evaluate)
        report.simulation.seconds["read"] = read_seconds
        with_left_out(report, dropped)
        if write_messages is not None:
            from ..engine import capped_partitions_warning, write_messages as write

            report.warnings += filter(None, [capped_partitions_warning(partitions, len(run.messages))])
            start = time.perf_counter()
            categories = getattr(encoder, "categories", None)  # a public list: analyze names the codes by it
            write(write_messages, run.result.parameters, run.messages, partitions, _messages_info(
                report, kind=encoder.kind, domain_size=domain, randomness=run.randomness,
                users=run.result.parameters.n_users,  # all n users' messages
                **({"categories": categories} if categories else {})))
            report.simulation.seconds["write_messages"] = time.perf_counter() - start
            report.messages_written = str(write_messages)
    _emit(report_document(report), as_json, output, lambda: _print_estimate(report, verbose))




def _print_estimate(report, verbose: bool) -> None:
    _say(f"input: {report.input}")
    _estimate_table(_titled(f"{report.protocol}: top {_count(len(report.estimates), 'item')}", report),
                    report.estimates, report.parameters.get("item_key"))
    _say_privacy(report.privacy, report.privacy_profile, verbose)
    m, e, expected = report.messages, report.error, report.expected_error
    _say(f"cost: {m.total} messages from {report.n_users} users ({m.per_user:.3f} per user), "
         f"{report.bits_per_message} bits per message")
    if e is not None:
        over = f"the {e.items} items of the domain" if e.over == "domain" else f"the {e.items} {e.over}"
        _say(f"error against the true counts (--evaluate: not for release) over {over}: "
             f"max {e.max_abs:.1f}, mean {e.mean_abs:.2f}, p50 {e.p50:.1f}, p90 {e.p90:.1f}, p99 {e.p99:.1f}")
    _say(f"{'  ' if e is not None else ''}theory: an item's stderr at most {expected.standard_error:.1f} (at its worst "
         f"count), max-error bound {expected.max_error_bound:.1f} w.p. {1 - expected.max_error_beta:.0%}")
    for g in report.groups or ():
        _say(f"  group epsilon {g.epsilon:g}: {g.n_users} users, p = {g.sampling_probability:.4g}, weight "
             f"{g.weight:.3f}")
    if report.unweighted_error is not None:
        u = report.unweighted_error
        _say(f"  unweighted baseline (sum of tau_g / p_g): max {u.max_abs:.1f}, mean {u.mean_abs:.2f}, p90 "
             f"{u.p90:.1f}")
    _say(f"simulation: {report.simulation.mode} path, {report.simulation.randomness}")
    _say_written(report)


def _say_written(report) -> None:
    if report.messages_written:
        _say(f"messages written to {report.messages_written} (privagg analyze {report.protocol} --params "
             f"{Path(report.messages_written) / 'params.json'} --messages {report.messages_written})")


def _estimate_command(entry: ProtocolEntry) -> Callable[..., None]:
    categorical = entry.categorical
    params = [
        *_input_parameters(),
        _param("domain", Optional[int], typer.Option(
            None, "--domain",
            help="Number of categories N: integer items must lie in [0, N)." if categorical else
                 "Domain size B: integer items must lie in [0, B), text is hashed into [B]. "
                 + ("Required with --input; default for the bundled words: their 100 most common, B = 100."
                    if entry.small_domain else "Default: 2^24."))),
        *_protocol_parameters(entry),
        _param("candidates", Optional[Path], typer.Option(
            None, "--candidates", help="The public list of the N categories, one per line (an item outside it is "
                                       "an error), fixed without looking at the users' data. Default: the bundled "
                                       "data's." if categorical else
                                       PUBLIC_CANDIDATES + " The input file itself, or a copy, is refused.")),
        _param("top", int, typer.Option(10, "--top", help="How many top items to report.")),
        *_seed_and_evaluate_options(),
        *_user_options(vectors=False),
        *_hash_key_option(entry, "The public item-hash key (hex, e.g. parameters.item_key of an earlier run): the "
                                 "same strings get the same codes. Default: derived from --seed, else random."),
        _param("full_domain", Optional[bool], typer.Option(
            None, "--full-domain/--no-full-domain", help="Estimate every item of [B] (default when B <= 2^24 and its "
            "cost fits about a second, or 10 ms a user).")),
        _param("mode", Mode, typer.Option(Mode.faithful, "--mode",
                                          help="faithful: through every role; fast: simulation shortcuts.")),
        _verbose_option(),
        _param("as_json", bool, typer.Option(False, "--json", help="Print the JSON report.")),
        _param("output", Optional[Path], typer.Option(
            None, "--output", help="Write the JSON report to FILE (stdout gets the human summary).")),
        _param("progress", Optional[bool], typer.Option(
            None, "--progress/--no-progress", help="Progress on stderr: bars on a terminal, else plain lines "
                                                   "(default: on a terminal only).")),
    ]
    if entry.served:  # one-round protocols, whose messages privagg analyze reads
        params += [
            _param("write_messages", Optional[Path], typer.Option(
                None, "--write-messages", help="Also write the shuffled messages as Parquet partitions and "
                                               "params.json into DIR (for privagg analyze).")),
            _param("partitions", int, typer.Option(16, "--partitions", help="Partitions for --write-messages.")),
        ]

    if entry.categorical and "min_count_fraction" in {o.name for o in entry.options}:
        params.append(_param("epsilon_column", Optional[str], typer.Option(
            None, "--epsilon-column", help="Weighted aggregation: the table's column of each user's epsilon; users "
                                           "are grouped by it, each group sampled at its own p, and the groups "
                                           "combined by inverse-variance weights (--epsilon is then the largest a "
                                           "user may ask for).")))

    def body(**kw: Any) -> None:
        kw.setdefault("write_messages", None)
        kw.setdefault("partitions", 1)
        kw.setdefault("epsilon_column", None)
        _estimate(entry, **kw)

    return _command(body, params, entry.title)


def _estimate_vector(entry: ProtocolEntry, *, input: Optional[Path], delimiter: Optional[str], header: bool,
                     clip: bool, epsilon: float, delta: float, calibration: Enum, seed: Optional[int],
                     evaluate: Optional[bool], show: int,
                     verbose: bool, as_json: bool, output: Optional[Path], progress: Optional[bool],
                     write_messages: Optional[Path], partitions: int, dimension: Optional[int] = None,
                     candidates: Optional[Path] = None, mode: Mode = Mode.faithful, discover_phi: Optional[float] = None,
                     missing: Optional[Enum] = None, user_column: Optional[str] = None,
                     max_rows: Optional[int] = None, **options: Any) -> None:
    from ..io import InputFormat
    from ..pipelines import with_left_out
    from ..reports import report_document
    from ..simulate.frequency import estimate_vector_sum

    if entry.family is Family.PRIVACY_BLANKET:  # its calibration's bounds need scipy: imported while the input is read,
        from ..privacy import blanket  # unless their values are kept on disk
        from ..privacy.shuffle import load_special_meanwhile

        if not blanket.values_kept():
            load_special_meanwhile()
    with _clean_errors():
        _check_output(output, input, candidates)
        _check_public(candidates, input)
        _check_stdin_format(input, delimiter, "a .npy array, or a CSV, TSV or Parquet table of vectors (one row a "
                            "user; standard input as a table needs --delimiter)")
        if write_messages is not None:
            if mode is Mode.fast:
                raise ParameterError("write-messages", "left out with --mode fast (the fast path makes no messages; "
                                     "--mode faithful writes them)",
                                     str(write_messages))
            from ..engine import prepare_message_folder

            prepare_message_folder(write_messages, partitions)
        fmt = InputFormat(delimiter=delimiter, header=header, missing="error" if missing is None else missing.value)
        if user_column is not None or max_rows is not None:
            from .inputs import _read_coordinates

            report, names = _by_user(entry, input, user_column, fmt, None, {
                "write-messages": write_messages, "discover-phi": discover_phi, "clip": clip or None},
                max_rows=max_rows, epsilon=epsilon, delta=delta, calibration=calibration.value,
                domain_size=dimension, seed=seed, evaluate=_evaluating(evaluate, input, seed),
                **({"candidates": _read_coordinates(candidates).tolist()} if candidates is not None else {}),
                **({"mode": mode.value} if entry.one_sparse else {}), **options), None
        else:
            with _located(input, fmt, vectors=True):
                inputs, dimension, coordinates, names, name, warnings, dropped = _read_vector_input(
                    entry, input, fmt, clip, dimension, candidates, _evaluating(evaluate, input, seed))
            if discover_phi is not None and write_messages is not None:
                raise ParameterError("write-messages", "left out with --discover-phi (its two stages' messages are "
                                     "not written)", str(write_messages))
            with _progress(progress) as advance, _located(input, fmt, vectors=True):
                report, run = estimate_vector_sum(entry.name, inputs, epsilon=epsilon, delta=delta,
                                                  calibration=calibration.value, options=options, dimension=dimension,
                                                  candidates=coordinates, names=names, mode=mode.value, seed=seed,
                                                  input_name=name, progress=advance, warnings=warnings,
                                                  keep_messages=write_messages is not None, discover_phi=discover_phi,
                                                  evaluate=_evaluating(evaluate, input, seed))
            with_left_out(report, dropped)
            if write_messages is not None:
                from ..engine import capped_partitions_warning, write_messages as write

                report.warnings += filter(None, [capped_partitions_warning(partitions, len(run.messages))])
                start = time.perf_counter()
                write(write_messages, run.result.parameters, run.messages, partitions, _messages_info(
                    report, kind="vector", domain_size=run.result.parameters.domain_size, randomness=run.randomness,
                    users=run.result.parameters.n_users,  # all n users' messages
                    input_warnings=warnings))  # how the values were made ready (--clip): analyze says it again
                report.simulation.seconds["write_messages"] = time.perf_counter() - start
                report.messages_written = str(write_messages)

    def human() -> None:
        shown = sorted(report.estimates, key=lambda e: -e.estimate)[:show] if names else report.estimates[:show]
        _say(f"input: {report.input} ({report.n_users} users, d = {report.parameters.get('dimension', len(shown))}, "
             f"{len(report.estimates)} coordinates estimated)")
        evaluated = report.error is not None
        _table(_titled(f"{report.protocol}: " + (
            f"no coordinate discovered at phi {report.discovery.phi:g}, none estimated (see the warning)"
            if report.discovery is not None and not report.estimates else f"the {len(shown)} largest sums" if names
            else f"sums of the first {len(shown)} coordinates"), report),
            [(column, "right") for column in ("coordinate", "sum ± stderr", "mean",
                                              *(("true sum (--evaluate)",) if evaluated else ()))],
            [[_item_cell(e.name or e.item), f"{e.estimate:.1f} ± {e.stderr:.1f}", f"{e.estimate / report.n_users:.4f}",
              *((f"{e.true_sum:.1f}",) if evaluated else ())] for e in shown])
        _say_privacy(report.privacy, report.privacy_profile, verbose)
        m, err = report.messages, report.error
        noise = (f"gamma = {report.parameters['gamma']:.4g}" if "gamma" in report.parameters else
                 f"mu = {report.parameters['mu']:.4g} dummies a cell")
        _say(f"cost: {m.total} messages from {report.n_users} users ({m.per_user:.3f} per user), "
             f"{report.bits_per_message} bits per message; {noise}")
        if report.discovery is not None:
            found = report.discovery
            _say(f"discovery ({found.parameters['protocol']}, phi {found.phi:g}): {found.coordinates} coordinates "
                 f"found with {found.messages.total} of the messages; {found.privacy}")
        if err is not None:
            # the MSE of the mean and the normalised MSE average over all d coordinates: dense vectors only (over
            # the 1-sparse protocols' d = 2^40 they read 1e-17, meaning nothing)
            dense = "" if err.normalised_mse is None else (f", MSE of the mean {err.mse_of_mean:.3g}, normalised MSE "
                                                           f"{err.normalised_mse:.3g}")
            _say(f"error against the true sums (--evaluate: not for release): max {err.max_abs:.1f}, squared "
                 f"error {err.squared_error:.4g}{dense}")
        _say(f"theory: expected sd {report.expected_error.standard_error:.3g} a coordinate")
        _say(f"simulation: {report.simulation.mode} path, {report.simulation.randomness}")
        _say_written(report)

    _emit(report_document(report), as_json, output, human)


def _vector_estimate_command(entry: ProtocolEntry) -> Callable[..., None]:
    sparse = entry.one_sparse
    params = [
        _param("input", Optional[Path], typer.Option(
            None, "--input", callback=_input_file, help=(
                                   "The users' (coordinate, weight) rows, weights in [0, 1]: an (n, 2) .npy array or "
                                   "a two-column CSV, TSV or Parquet table. Default: the bundled words with weights."
                                   if sparse else "The users' vectors in [0, 1]^d: an (n, d) .npy array, or a CSV, "
                                   "TSV or Parquet table (one row a user, every column a coordinate). Default: the "
                                   "bundled digits.") + " - reads standard input.")),
        _param("delimiter", Optional[str], typer.Option(None, "--delimiter", help="Read the input as a table with "
                                                                                  "this delimiter.")),
        _param("header", bool, typer.Option(True, "--header/--no-header", help="Whether the table's first line "
                                                                                "names its columns.")),
        _param("missing", MissingChoice, typer.Option(
            "error", "--missing", help="A blank line or an empty cell: error (default, naming the line) or drop "
                                       "(leave the user out); NaN is a value, not a missing one.")),
        _param("clip", bool, typer.Option(False, "--clip", help="Clip values to [0, 1] (otherwise a value outside "
                                                                "is an error naming its row and column).")),
        *_protocol_parameters(entry),
        *_seed_and_evaluate_options(),
        *_user_options(vectors=True),
        _param("show", int, typer.Option(20, "--show", help="How many coordinates to print (the JSON has all).")),
        _verbose_option(),
        _param("as_json", bool, typer.Option(False, "--json", help="Print the JSON report.")),
        _param("output", Optional[Path], typer.Option(None, "--output", help="Write the JSON report to FILE.")),
        _param("progress", Optional[bool], typer.Option(None, "--progress/--no-progress", help="Progress on stderr.")),
        _param("write_messages", Optional[Path], typer.Option(
            None, "--write-messages", help="Also write the shuffled messages as Parquet partitions and params.json "
                                           "into DIR (for privagg analyze).")),
        _param("partitions", int, typer.Option(16, "--partitions", help="Partitions for --write-messages.")),
    ]
    if sparse:
        params += [
            _param("dimension", Optional[int], typer.Option(
                None, "--dimension", help="B: the public number of coordinates (required with --input).")),
            _param("candidates", Optional[Path], typer.Option(
                None, "--candidates", help="File of public candidate coordinates (integers, one per line) to "
                                           "estimate, chosen without looking at the users' data; the others are "
                                           "estimated as 0. Default: every coordinate.")),
            _param("mode", Mode, typer.Option(Mode.faithful, "--mode", help="faithful: through every role; fast: "
                                                                             "simulation shortcuts.")),
        ]
    if entry.discovery is not None:
        params.append(_param("discover_phi", Optional[float], typer.Option(
            None, "--discover-phi", help=f"No candidate list: find the coordinates whose sums reach PHI n with "
                                         f"{entry.discovery.protocol} over {entry.discovery.what} first; each stage "
                                         "gets half of epsilon and delta (the paper's two stages).")))
    return _command(lambda **kw: _estimate_vector(entry, **kw), params, entry.title)


def _estimate_hh(entry: ProtocolEntry, *, input: Optional[Path], column: Optional[str], item_type: Enum,
                 delimiter: Optional[str], header: bool, missing: Enum, domain: Optional[int], epsilon: float,
                 delta: float, calibration: Enum, phi: Optional[float], max_length: Optional[int],
                 seed: Optional[int], evaluate: Optional[bool], verbose: bool, as_json: bool, output: Optional[Path],
                 progress: Optional[bool], user_column: Optional[str], max_items: int) -> None:
    from ..io import InputFormat, read_items
    from ..pipelines import with_left_out
    from ..reports import report_document
    from ..simulate.heavy_hitters import estimate_heavy_hitters

    with _clean_errors():
        _check_output(output, input)
        _check_stdin_format(input, delimiter)
        evaluate, dropped = _evaluating(evaluate, input, seed), 0
        fmt = InputFormat(item_type.value, column, delimiter, header, missing.value)
        if user_column is not None or max_items != 1:
            report = _by_user(entry, input, user_column, fmt, None, {}, item=column, max_items=max_items,
                              epsilon=epsilon, delta=delta, phi=phi, domain_size=domain, max_length=max_length,
                              calibration=calibration.value, seed=seed, evaluate=evaluate)
        elif input is None:
            from .. import datasets  # (pyarrow: only for the bundled words)

            values, name = datasets.english_words(datasets.HEAVY_HITTER_USERS).to_pylist(), datasets.HH_DESCRIPTION
            if domain is not None:
                raise ParameterError("domain", "left out for the bundled words (strings: --max-length)", domain)
            max_length = datasets.HH_MAX_LENGTH if max_length is None else max_length
        else:
            values, dropped = read_items(input, fmt)
            name = _input_name(input)
            strings = isinstance(values, list) and values and isinstance(values[0], str)
            if strings and max_length is None:
                from ..protocols.heavy_hitters import DEFAULT_MAX_LENGTH

                max_length = DEFAULT_MAX_LENGTH
            if not strings and max_length is not None:
                raise ParameterError("max-length", "left out for integer items (--domain B sets their range)",
                                     max_length)
        if user_column is None and max_items == 1:
            with _progress(progress) as advance, _located(input, fmt):
                report, _ = estimate_heavy_hitters(values, epsilon=epsilon, delta=delta, phi=phi, domain_size=domain,
                                                   max_length=max_length, calibration=calibration.value, seed=seed,
                                                   input_name=name, progress=advance, evaluate=evaluate)
            with_left_out(report, dropped)

    def human() -> None:
        _say(f"input: {report.input} ({report.n_users} users); heavy: held by at least phi n = "
             f"{report.threshold:.0f} users")
        t, found = report.theory, len(report.heavy_hitters)
        e = report.evaluation
        _table(_titled(f"{report.protocol}: {_count(found, 'heavy hitter')} discovered" + (
            " -- NOT A RELIABLE LIST at this n and phi (see the guarantee below: more users or a larger phi)"
            if not report.reliable else ""), report),
            [(name, "left" if name == "item" else "right")
             for name in ("rank", "item", "estimate ± stderr", *(("true count (--evaluate)",) if e else ()))],
            [[str(rank), _item_cell(h.item), f"{h.estimate:.0f} ± {h.stderr:.0f}", *((str(h.true_count),) if e else ())]
             for rank, h in enumerate(report.heavy_hitters, 1)])
        _say_privacy(report.privacy, report.privacy_profile, verbose)
        m, p = report.messages, report.parameters
        _say(f"cost: {m.total} messages from {report.n_users} users ({m.per_user:.3f} per user), "
             f"{report.bits_per_message} bits per message; {p['levels']} levels, p_f = "
             f"{p['filter_probability']:.4g}, prefixes followed per level: "
             f"{' '.join(map(str, report.survivors))}")
        _say(f"guarantee (normal approximation): an item held by >= 1.5 phi n users is missed w.p. <= "
             f"{t['miss_probability']:.2g}, one held by <= phi n / 2 reported w.p. <= "
             f"{t['false_report_probability']:.2g}; one held by >= (1 + c) phi n reported w.p. >= 95% and one by "
             f"<= (1 - c) phi n w.p. <= 5%, c = {t['report_band']:.2g}; items in between may go either way")
        if e is not None:
            recall = (f"recall {e.recall:.0%} (>= 1.5 phi n: {e.recall_strong:.0%})" if e.heavy_items else
                      "none to find")
            precision = (f"of the {e.reported} reported, precision {e.precision:.0%} (held by >= phi n / 2: "
                         f"{e.precision_loose:.0%})" if e.reported else "nothing reported")
            _say(f"against the true counts (--evaluate: not for release): {e.heavy_items} items held by >= phi n, "
                 f"{recall}; {precision}")
        _say(f"simulation: {report.simulation.randomness}; seconds "
             + ", ".join(f"{k} {v:.2f}" for k, v in report.simulation.seconds.items()))

    _emit(report_document(report), as_json, output, human)


def _hh_estimate_command(entry: ProtocolEntry) -> Callable[..., None]:
    params = [
        *_input_parameters(),
        _param("domain", Optional[int], typer.Option(None, "--domain", help="Integer items: B, items in [0, B), "
                                                                            "up to 2^64.")),
        *_protocol_parameters(entry),
        *_seed_and_evaluate_options(),
        *_user_options(vectors=False),
        _verbose_option(),
        _param("as_json", bool, typer.Option(False, "--json", help="Print the JSON report.")),
        _param("output", Optional[Path], typer.Option(None, "--output", help="Write the JSON report to FILE.")),
        _param("progress", Optional[bool], typer.Option(None, "--progress/--no-progress", help="Progress on stderr.")),
    ]
    return _command(lambda **kw: _estimate_hh(entry, **kw), params, entry.title)
