"""RedisInbox: the frontier's main lane in a worker, fed from the owned partitions' streams.

It has the surface of a :class:`~larbin_py.frontier.interfaces.UrlQueue`
(the frontier pops it synchronously in ``load``); the coordinator fills it
in its tick with fenced reads of ``q:{p}`` (``lb_read``), never beyond
``capacity`` records (ramUrls/10: the backlog waits in Redis, where it is
durable).  Each record's ``tag`` is ``"<partition>/<entry id>"``: the ack
of its outcome finds the entry by it.  Nothing here is durable and nothing
needs to be: every record is pending in its stream until acked.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterator

from ..frontier.store import UrlRecord
from .sink import decode_entry

__all__ = ["RedisInbox", "make_tag", "split_tag"]


def make_tag(p: int, entry_id: str) -> str:
    return f"{p}/{entry_id}"


def split_tag(tag: str) -> tuple[int, str] | None:
    """``(partition, entry id)`` of a record's tag, None for an untagged record."""
    p, sep, entry = tag.partition("/")
    if not sep:
        return None
    try:
        return int(p), entry
    except ValueError:
        return None


class RedisInbox:
    """Prefetched records of the owned partitions (a FIFO), at most about ``capacity``."""

    corrupt_records = 0

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._q: deque[UrlRecord] = deque()
        self.malformed = 0  # entries whose record could not be read (acked as badUrl)

    @property
    def room(self) -> int:
        """Records a read may still bring."""
        return max(0, self.capacity - len(self._q))

    @staticmethod
    def record(p: int, entry_id: str, data: bytes) -> UrlRecord | None:
        """The record of one stream entry, tagged with its partition and id."""
        parsed = decode_entry(data)
        if parsed is None:
            return None
        url, depth, retries, hops, via, prev = parsed
        return UrlRecord(url, depth, retries, hops, make_tag(p, entry_id), via, prev=prev)

    # --- the UrlQueue surface ---------------------------------------------
    def push(self, rec: UrlRecord) -> None:
        self._q.append(rec)

    def pop(self) -> UrlRecord | None:
        return self._q.popleft()

    def __len__(self) -> int:
        return len(self._q)

    @property
    def in_memory(self) -> int:
        return len(self._q)

    @property
    def on_disk_only(self) -> int:
        return 0

    def flush(self, sync: bool = False) -> None:
        pass

    def read_position(self) -> tuple[int, int]:
        return (0, 0)

    def write_position(self) -> tuple[int, int]:
        return (0, 0)

    def release_through(self, segment: int) -> int:
        return 0

    def ram_records(self) -> Iterator[UrlRecord]:
        return iter(self._q)

    def close(self) -> None:
        self._q.clear()

    def drop(self, gone: Callable[[UrlRecord], bool]) -> int:
        """Forget the records ``gone`` names (their partition was handed over): how many."""
        kept = deque(rec for rec in self._q if not gone(rec))
        n = len(self._q) - len(kept)
        self._q = kept
        return n
