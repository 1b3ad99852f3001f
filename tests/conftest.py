from hypothesis import settings

# The first call of a numba kernel compiles it; a deadline would flag that.
settings.register_profile("privagg", deadline=None)
settings.load_profile("privagg")
