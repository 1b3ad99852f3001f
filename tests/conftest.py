from hypothesis import settings

# The first call of a numba kernel compiles it; a deadline would flag that.
settings.register_profile("privagg", deadline=None)
settings.load_profile("privagg")


def pytest_configure(config):
    # Registered here, not in pyproject.toml; whether `slow` tests run by default is decided there, not here.
    config.addinivalue_line("markers", "slow: long statistical or cluster tests (select with -m slow / -m 'not slow')")
