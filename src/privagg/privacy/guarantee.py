"""What a result promises: (epsilon, delta), in which model, and how it was computed."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class PrivacyGuarantee:
    """An (epsilon, delta)-DP guarantee.

    ``model`` is the trust model ("shuffle", "central" or "local"); ``method``
    says how the guarantee was established (a theorem of a paper, an exact
    numeric computation, ...), so a reader can judge it.
    """

    epsilon: float
    delta: float
    model: str
    method: str

    def to_dict(self) -> dict:
        return asdict(self)
