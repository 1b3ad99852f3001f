"""The SDK of a DPDS or DPDG user: his rounds against the sharing server, run by
:class:`~privagg.service.round_client.RoundClient` (the protocol is the role its registry entry declares,
:class:`privagg.protocols.sharing_parties.SharingUser`).
"""

from __future__ import annotations

from ..round_client import RoundClient
from ..round_tasks import SharingTask


class SharingClient(RoundClient):
    """One DPDS or DPDG user's device in one task of the sharing server."""

    task_type = SharingTask
