import sys

import pytest

from hypothesis import settings

# pytest rewrites each test module's asserts when it imports it and keeps the result in __pycache__, unless
# bytecode writing is off (PYTHONDONTWRITEBYTECODE, set on the machines this was developed on): then each xdist
# worker rewrote every test module in every run, half of a worker's collection (12 s -> 6 s of CPU). On here, as
# the Makefile compiles src/ for the same reason; the processes the tests start keep the environment's setting.
sys.dont_write_bytecode = False

# The first call of a numba kernel compiles it; a deadline would flag that.
settings.register_profile("privagg", deadline=None)
settings.load_profile("privagg")


def _invoke_the_command_line_main_runs() -> None:
    """``CliRunner().invoke(app, ...)`` runs the command tree ``privagg``'s entry point runs
    (``privagg.cli._command_line``: each command made when the command line names it), where typer's test runner made
    every command of the app on each call (typer.main.get_command: about 45 ms of CPU an invoke): the tests then check
    the path a user's command takes, and the suite's CPU fell 515 -> 434 s. Any other Typer app is made as typer
    makes it."""
    import typer.testing

    made = typer.testing._get_command

    def get_command(app):
        import privagg.cli as cli

        return cli._command_line() if app is cli._app else made(app)

    typer.testing._get_command = get_command


_invoke_the_command_line_main_runs()


def _absl_writes_to_the_real_stderr() -> None:
    """absl's logging handler (absl.logging, imported by dp-accounting, the ledger's PLD accountant) takes
    ``sys.stderr`` as it is at its import: in a test, the capture's stream of that moment. Its ``close`` closes any
    stream that is not the current sys.stderr or stdout, and ``logging.config.dictConfig`` (uvicorn's, each time a
    test serves an app in process) closes every handler: when a ``capsys`` test served an app, the session's capture
    stream was closed, and that test and every later one of the worker failed on it ("I/O operation on closed
    file"). Here it writes to the process's own stderr, which its ``close`` leaves open."""
    try:
        import absl.logging
    except ImportError:  # (dp-accounting is the service extra's)
        return
    absl.logging.get_absl_handler().python_handler.setStream(sys.__stderr__)


_absl_writes_to_the_real_stderr()

_KEPT_PORTALS: list = []  # (the client, its portal's exit stack) opened since the last test ended


def _one_event_loop_per_test_client() -> None:
    """A ``TestClient`` used without ``with`` (no lifespan: the tests run no ticker) serves its app on one event loop
    of its own from its first request until the test ends, as uvicorn serves an app on one loop, where starlette
    started a new loop thread (and a new worker thread for a synchronous route) for each request: about 1.3 ms of
    CPU a request, thousands of requests in the service tests. The loops are stopped at each test's end
    (``pytest_runtest_teardown``), after its fixtures' own teardown; a client kept longer opens a new one."""
    import contextlib

    from anyio.from_thread import start_blocking_portal
    from starlette.testclient import TestClient

    @contextlib.contextmanager
    def portal_factory(self):
        if self.portal is None:
            stack = contextlib.ExitStack()
            self.portal = stack.enter_context(start_blocking_portal(**self.async_backend))
            _KEPT_PORTALS.append((self, stack))
        yield self.portal

    TestClient._portal_factory = portal_factory


def _stop_the_kept_event_loops() -> None:
    while _KEPT_PORTALS:
        client, stack = _KEPT_PORTALS.pop()
        client.portal = None
        stack.close()


_one_event_loop_per_test_client()


def pytest_configure(config):
    # Registered here, not in pyproject.toml; whether `slow` tests run by default is decided there, not here.
    config.addinivalue_line("markers", "slow: long statistical or cluster tests (select with -m slow / -m 'not slow')")


def pytest_sessionstart(session):
    # The analyzer seals its private keys under a key-encryption key from the environment (privagg.service.keys):
    # one random KEK for the session, which the services and commands the tests start inherit. Tests of a missing
    # or wrong KEK remove or replace it themselves.
    import base64
    import os
    import secrets

    os.environ.setdefault("PRIVAGG_KEK", base64.b64encode(secrets.token_bytes(32)).decode())
    # The tests check what the accountants compute, not what an earlier run kept on disk (privagg.privacy.
    # evaluation_cache): no value is read or kept, here or in the commands the tests start; its own tests point it at
    # a folder of theirs.
    os.environ["PRIVAGG_CACHE"] = "off"
    if session.config.pluginmanager.has_plugin("dsession"):  # the xdist controller, before its workers start
        compile_the_kernels()


def compile_the_kernels() -> None:
    """Every specialisation of privagg.core.hash_kernels the suite uses, compiled once into numba's cache (beside
    the sources): on a fresh clone each xdist worker, and each command a test starts, otherwise compiled the same
    kernels itself (about 20 s of CPU a process) until one had saved them. Through the public calls, so that the
    argument types are the ones the tests and commands pass; a warm cache is only read (about a second)."""
    import numpy as np

    from privagg.core.hashing import UniversalHash

    rng = np.random.default_rng(0)
    # count_all's int32 counters over the table of inverses, and without it; its uint8 and uint16 counters (each
    # with add_rows, count_direct and count_sorted); count_progressions; preimages
    for q, b, domain, messages in [(1031, 4, 1024, 2001), (1_048_583, 16, 1000, 2001), (4_194_319, 1000, 1 << 22, 2000),
                                   (262_147, 8, 1 << 12, 300)]:
        h = UniversalHash(q, b)
        u, v = h.sample_keys(messages, rng)
        w = rng.integers(0, b, messages)
        h.count_all(u, v, w, domain)
    h.count_matches(u, v, w, [0, 1])
    h.preimages(int(u[0]), int(v[0]), int(w[0]), domain)


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # the test's fixtures torn down first: they may still send requests
    _stop_the_kept_event_loops()
