"""The messages the round driver (:mod:`privagg.service.rounds`) reads back from its database: a round's messages
to the server as the coordinator indexes them (:class:`StoredMessages`), and the bounded cache of stored messages
that spares a read (:class:`MessageCache`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .rounds import RoundDriver


class StoredMessages(Mapping):
    """The messages users sent the server in one round of a task (user -> bytes), as the coordinator reads them:
    one user's at a time on demand (:meth:`~privagg.service.rounds.RoundDriver._message`), every user's in one query once iterated (and
    kept by this mapping: the release and a round's close read them all)."""

    def __init__(self, driver: RoundDriver, task_id: str, number: int) -> None:
        self.driver, self.task_id, self.number = driver, task_id, number
        self._all: dict[int, bytes] | None = None

    def _every(self) -> dict[int, bytes]:
        if self._all is None:
            self._all = self.driver._round_messages(self.task_id, self.number)
        return self._all

    def __getitem__(self, user: int) -> bytes:
        if self._all is not None:
            return self._all[user]
        return self.driver._message(self.task_id, self.number, user)

    def __iter__(self) -> Iterator[int]:
        return iter(self._every())

    def __len__(self) -> int:
        return len(self._every())


class MessageCache:
    """Stored messages by (task, round, user), the least recently read dropped past ``limit`` bytes. A stored
    message never changes, so what is kept stays true; a restarted server starts empty."""

    def __init__(self, limit: int) -> None:
        self.limit, self.size, self._kept = limit, 0, OrderedDict()
        self._lock = threading.Lock()

    def get(self, key) -> bytes | None:
        with self._lock:
            found = self._kept.get(key)
            if found is not None:
                self._kept.move_to_end(key)
            return found

    def put(self, key, message: bytes) -> None:
        with self._lock:
            if key in self._kept or len(message) > self.limit:
                return
            self._kept[key] = message
            self.size += len(message)
            while self.size > self.limit:
                self.size -= len(self._kept.popitem(last=False)[1])
