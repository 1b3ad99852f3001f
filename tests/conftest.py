import sys

from hypothesis import settings

# pytest rewrites each test module's asserts when it imports it and keeps the result in __pycache__, unless
# bytecode writing is off (PYTHONDONTWRITEBYTECODE, set on the machines this was developed on): then each xdist
# worker rewrote every test module in every run, half of a worker's collection (12 s -> 6 s of CPU). On here, as
# the Makefile compiles src/ for the same reason; the processes the tests start keep the environment's setting.
sys.dont_write_bytecode = False

# The first call of a numba kernel compiles it; a deadline would flag that.
settings.register_profile("privagg", deadline=None)
settings.load_profile("privagg")


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
