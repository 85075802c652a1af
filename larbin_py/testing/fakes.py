"""In-memory stand-ins for the frontier's stores (tests, benchmarks).

:class:`MemoryQueue` implements :class:`~larbin_py.frontier.interfaces.UrlQueue`
and :class:`MemorySeen` implements :class:`~larbin_py.frontier.interfaces.SeenStore`
with plain Python containers: nothing is written anywhere, so a crawl using
them cannot be continued with ``--reload`` (run it with ``canReload`` off).
:func:`memory_stores` is a :data:`~larbin_py.frontier.interfaces.StoreFactory`
that keeps the lanes it built (``factory.lanes["main"]``) for a test to look at.
"""

from __future__ import annotations

from collections import deque
from typing import Iterator, Sequence

from ..frontier.store import UrlRecord

__all__ = ["MemoryQueue", "MemorySeen", "memory_stores"]


class MemoryQueue:
    """A FIFO of :class:`UrlRecord` held in RAM; positions count records.

    ``read_position()`` is ``(0, records popped)`` and ``write_position()``
    ``(0, records pushed)``, so a checkpoint taken with it is consistent,
    though nothing survives the process.
    """

    def __init__(self, name: str = "", ram_urls: int = 0) -> None:
        self.name = name
        self.ram_urls = ram_urls
        self._records: deque[UrlRecord] = deque()
        self.pushed = 0
        self.popped = 0
        self.flushes = 0
        self.closed = False
        self.corrupt_records = 0

    def push(self, rec: UrlRecord) -> None:
        if self.closed:
            raise ValueError(f"push to the closed queue {self.name!r}")
        self._records.append(rec)
        self.pushed += 1

    def pop(self) -> UrlRecord | None:
        rec = self._records.popleft()
        self.popped += 1
        return rec

    def __len__(self) -> int:
        return len(self._records)

    @property
    def in_memory(self) -> int:
        return len(self._records)

    @property
    def on_disk_only(self) -> int:
        return 0

    def flush(self, sync: bool = False) -> None:
        self.flushes += 1

    def read_position(self) -> tuple[int, int]:
        return 0, self.popped

    def write_position(self) -> tuple[int, int]:
        return 0, self.pushed

    def release_through(self, segment: int) -> int:
        return 0

    def ram_records(self) -> Iterator[UrlRecord]:
        return iter(self._records)

    def close(self) -> None:
        self.closed = True


def memory_stores():
    """A store factory building :class:`MemoryQueue` lanes; ``.lanes`` maps name to lane."""
    lanes: dict[str, MemoryQueue] = {}

    def factory(name: str, ram_urls: int) -> MemoryQueue:
        lanes[name] = lane = MemoryQueue(name, ram_urls)
        return lane

    factory.lanes = lanes  # type: ignore[attr-defined]
    return factory


class MemorySeen:
    """A Python set of fingerprints: the seen test without a log or an array."""

    def __init__(self, fps: Sequence[int] = ()) -> None:
        self._set: set[int] = set(fps)
        self.batches = 0  # add_many calls (one per page's links)
        self.flushes = 0
        self.closed = False

    def add_many(self, fps: Sequence[int]) -> list[bool]:
        self.batches += 1
        known = self._set
        out = []
        for fp in fps:
            if fp in known:
                out.append(False)
            else:
                known.add(fp)
                out.append(True)
        return out

    def __contains__(self, fp: int) -> bool:
        return fp in self._set

    def __len__(self) -> int:
        return len(self._set)

    def flush(self, sync: bool = False) -> None:
        self.flushes += 1

    def close(self) -> None:
        self.closed = True
