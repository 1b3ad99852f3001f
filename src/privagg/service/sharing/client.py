"""The SDK of a DPDS or DPDG user: his rounds against the sharing server, run by
:class:`~privagg.service.round_client.RoundClient` (the protocol is the role its registry entry declares,
:class:`privagg.protocols.sharing_parties.SharingUser`).
"""

from __future__ import annotations

from ...protocols.sharing_graph import task_degree
from ..round_client import RoundClient
from ..round_tasks import SharingTask


class SharingClient(RoundClient):
    """One DPDS or DPDG user's device in one task of the sharing server: on the complete graph he masks with every
    user, so takes the whole roster; on a neighbour graph the entries of the users the server names to him."""

    task_type = SharingTask

    @property
    def whole_roster(self) -> bool:
        return task_degree(self.task.parameters) == self.task.parameters.n_users - 1
