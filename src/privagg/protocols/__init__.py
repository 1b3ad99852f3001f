"""One module per protocol family; each protocol = parameters + roles + theory.

``CATALOGUE`` lists every protocol privagg implements or plans, for
``privagg protocols``; ``PROTOCOLS`` maps the runnable names to classes.
"""

from .balls_into_bins import FE0, FE1, BallsIntoBinsCentral, FrequencyOracle
from .balls_into_bins import PROTOCOLS

# (name, family, trust model, expected messages per user, status)
CATALOGUE = [
    ("bib", "balls into bins", "central (trusted curator)", "1", "implemented"),
    ("fe0", "balls into bins", "shuffle", "1 + rho, rho = mu B / n", "implemented"),
    ("fe1", "balls into bins", "shuffle", "1 + rho, rho = mu b / n", "implemented"),
    ("heavy-hitters", "balls into bins", "shuffle", "p_f (1 + rho)", "planned"),
    ("sparse-vector-sum", "balls into bins", "shuffle", "1 + o(1)", "planned"),
    ("blanket-histogram", "privacy blanket", "shuffle", "1", "planned"),
    ("blanket-vector", "privacy blanket", "shuffle", "k per user", "planned"),
    ("dpcs / dpcs* / dpds / dpdg", "sampling + secret sharing", "no trusted server", "shares of one-hot vectors",
     "planned"),
    ("tss / tss'", "sampling + secret sharing", "two servers", "shares of one-hot vectors", "planned"),
    ("grr / oue / olh / hadamard", "baselines", "local", "1", "planned"),
    ("laplace / gaussian / discrete gaussian", "baselines", "central", "1", "planned"),
]

__all__ = ["FE0", "FE1", "BallsIntoBinsCentral", "FrequencyOracle", "PROTOCOLS", "CATALOGUE"]
