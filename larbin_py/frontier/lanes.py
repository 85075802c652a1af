"""The frontier's URL library: three FIFO lanes of URL records (main, priority, wait).

``main`` holds the links admitted from pages; ``prio`` the start URLs, the
URLs given at run time and the records carried over a restart; ``wait``
the URLs whose site FIFO was full when they were loaded (Larbin's
``URLsDiskWait``; the frontier's :class:`~larbin_py.frontier.refill.WaitRefill`
says when they come back).  Each lane is a
:class:`~larbin_py.frontier.interfaces.UrlQueue` built by a
:data:`~larbin_py.frontier.interfaces.StoreFactory`: by default
:func:`disk_stores`, segment files in ``stateDir/frontier/<lane>``; the
distributed mode injects its own main lane (a worker's Redis inbox).

The lanes share the RAM budget ``ram_urls``: the priority and wait lanes get
a tenth each, the main lane the rest.  :class:`Lanes` holds no policy: it
answers for the three together (sizes, flushes, positions, damage) so that
neither the frontier nor a checkpoint walks them one by one.  Errors: an
``OSError`` from a lane (a full disk) propagates: the crawl state cannot be
written and the engine stops the crawl.
"""

from __future__ import annotations

import os
from typing import Callable

from .interfaces import StoreFactory, UrlQueue
from .store import UrlRecord, UrlStore

__all__ = ["Lanes", "disk_stores"]


def disk_stores(state_dir: str, *, positions: dict | None = None,
                segment_bytes: int = 64 * 1024 * 1024) -> StoreFactory:
    """The default lanes: :class:`UrlStore` segments in ``state_dir/<name>``.

    ``positions`` (a checkpoint's ``stores``) reopens the segments left by
    an earlier run from those read positions (``--reload``).
    """

    def store(name: str, ram: int) -> UrlStore:
        directory = os.path.join(state_dir, name)
        if positions is None:
            return UrlStore(directory, ram_urls=ram, segment_bytes=segment_bytes)
        # Records parked in the wait store after the checkpoint were popped
        # from a store after it too, so they are read again: cut them off.
        cut = positions.get("wait_end") if name == "wait" else None
        return UrlStore.open_existing(directory, tuple(positions[name]), ram_urls=ram,
                                      segment_bytes=segment_bytes,
                                      truncate_at=tuple(cut) if cut is not None else None)

    return store


class Lanes:
    """The three lanes, built by ``stores`` with their shares of ``ram_urls``.

    ``main``: a main lane to use instead of the factory's (the distributed
    mode's inbox).  ``reopened``: the lanes were reopened after a restart:
    the records parked in the wait lane then are placed as fresh ones first
    (:attr:`parked_at_start`), their sites having no overflow count yet.
    """

    def __init__(self, stores: StoreFactory, ram_urls: int, *, main: UrlQueue | None = None,
                 reopened: bool = False) -> None:
        lane = max(1, ram_urls // 10)
        self.main: UrlQueue = main if main is not None else stores("main", max(1, ram_urls - 2 * lane))
        self.prio: UrlQueue = stores("priority", lane)
        self.wait: UrlQueue = stores("wait", lane)
        #: Records in the wait lane when it was reopened (0 on a fresh start).
        self.parked_at_start = len(self.wait) if reopened else 0

    @property
    def queued(self) -> int:
        """Records in the three lanes."""
        return len(self.prio) + len(self.main) + len(self.wait)

    @property
    def in_memory(self) -> int:
        """Records held in the lanes' RAM windows."""
        return self.prio.in_memory + self.main.in_memory + self.wait.in_memory

    @property
    def on_disk_only(self) -> int:
        """Records held only outside RAM (on disk, or in Redis)."""
        return self.main.on_disk_only + self.prio.on_disk_only + self.wait.on_disk_only

    @property
    def corrupt_records(self) -> int:
        """Records lost to damage (torn segments), counted once."""
        return self.main.corrupt_records + self.prio.corrupt_records + self.wait.corrupt_records

    def damage(self) -> list[str]:
        """What reopening found damaged beyond a torn record, one sentence each."""
        return [message for lane in (self.main, self.prio, self.wait) for message in getattr(lane, "damage", ())]

    def flush(self, sync: bool = False) -> None:
        """Write out what was pushed (``sync``: on disk too).  The seen store is not
        flushed here: its owner flushes it after the lanes (see SeenStore)."""
        for lane in (self.prio, self.main, self.wait):
            lane.flush(sync)

    def positions(self) -> dict[str, list[int]]:
        """Where a restart reads from: each lane's first record not in its RAM
        window, and ``wait_end``, the wait lane's write position (records parked
        after it were read again from another lane: a reload cuts them off)."""
        return {"main": list(self.main.read_position()),
                "priority": list(self.prio.read_position()),
                "wait": list(self.wait.read_position()),
                "wait_end": list(self.wait.write_position())}

    def ram_records(self) -> list[UrlRecord]:
        """The records of the three RAM windows (a checkpoint carries them)."""
        out: list[UrlRecord] = []
        for lane in (self.prio, self.wait, self.main):
            out.extend(lane.ram_records())
        return out

    def release(self, positions: dict) -> int:
        """Drop the segments before ``positions`` (a durable checkpoint's); units freed."""
        lanes = {"main": self.main, "priority": self.prio, "wait": self.wait}
        return sum(lane.release_through(positions[name][0]) for name, lane in lanes.items())

    def drop(self, gone: Callable[[UrlRecord | None], bool]) -> int:
        """Remove the records ``gone`` names from the three lanes at once; how many.

        A lane with a ``drop`` of its own (the distributed inbox) filters
        itself; the others are popped through and the kept records pushed
        back in order (a record lost to damage, None, is not kept).
        """
        n = 0
        for lane in (self.prio, self.wait, self.main):
            own = getattr(lane, "drop", None)
            if own is not None:
                n += own(gone)
                continue
            kept = []
            for _ in range(len(lane)):
                rec = lane.pop()
                if rec is None:
                    continue
                if gone(rec):
                    n += 1
                else:
                    kept.append(rec)
            for rec in kept:
                lane.push(rec)
        return n

    def close(self) -> None:
        """Flush and release the three lanes (idempotent)."""
        for lane in (self.prio, self.main, self.wait):
            lane.close()
