"""privagg: private aggregate statistics (frequencies, heavy hitters, vector sums) without a trusted collector."""

from .errors import ParameterError
from .protocols import FE0, FE1, BallsIntoBinsCentral

__version__ = "0.1.0"
__all__ = ["FE0", "FE1", "BallsIntoBinsCentral", "ParameterError", "__version__"]
