"""The page requests a worker has running, in a file that outlives the worker.

A URL that kills its worker (a parser crash, memory blown up by a page) must
not kill every worker of the crawl in turn: after :data:`CRASH_LIMIT
<larbin_py.distributed.redisio.CRASH_LIMIT>` deaths with its request running it is
forgotten as ``workerCrash``.  What counts is a *try*: a request that
started and had not ended when the worker died.  A stream entry's delivery
count is not one: entries read ahead into a worker's inbox and claimed
again by a takeover, or by the worker itself after a failed tick, were
never fetched (counting them forgot 477 URLs in four kills).

**Mechanism.**  ``stateDir/inflight-<workerId>`` is a table of fixed slots
of :data:`SLOT` bytes.  When a page request starts, :meth:`InflightLog.start`
writes its record's tag (``<partition>/<entry id>``) into a free slot with
one ``pwrite``; when its outcome has been applied (fetched, parsed, its
links offered, or forgotten, or put back for a retry), :meth:`end` zeroes
the slot.  The writes go to the page cache, so they survive the process's
death however it dies (SIGKILL, a segfault, the OOM killer), and cost a
system call each (about a microsecond); nothing is fsynced.

**After a death.**  Whoever starts next with that file -- the same worker
id restarted (the launcher's respawn, a service manager), or the launcher
when it gives up on a worker -- reads the tags left
(:func:`left_in`), counts one try against each in Redis (``lb_crashed``:
entries acked meanwhile are skipped), and only then empties the file
(:func:`count_crashes`).  A claim reads the counts: an entry at the limit is
acked as ``workerCrash`` and its URL named in the log and in the crawl's
``crashed`` list (the launcher's summary).

**Limits.**  A machine that dies loses the page cache and with it the tries
of that death (a machine crash is seldom a page's doing).  A worker that is
never started again on that stateDir leaves its tries uncounted; the URL
is then tried by the partition's next owner, whose own death counts.  The
launcher counts a dead worker's tries as soon as it has reaped it, before
anything else (its other processes may keep its output open a while); the
partitions' next owner claims only after the dead worker's leases expired
(``leaseTtl``).  Should the count still come later than that claim (Redis
failing meanwhile, a launcher stalled for longer than ``leaseTtl``), the
entry is tried once more, not lost.
A worker stopped cleanly (SIGTERM, the end of the crawl) ends every request
first, so its file is empty.
"""

from __future__ import annotations

import os
from collections import defaultdict

from .inbox import split_tag

__all__ = ["SLOT", "InflightLog", "inflight_path", "left_in", "count_crashes"]

#: Bytes per slot: a tag (at most SLOT - 1 bytes of UTF-8), NUL padded.
SLOT = 64
_FREE = bytes(SLOT)


def inflight_path(state_dir: str, worker: str) -> str:
    """Where worker ``worker`` keeps its running requests."""
    return os.path.join(state_dir, f"inflight-{worker}")


def left_in(path: str) -> list[str]:
    """The tags a dead worker left in its file (none when there is no file)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    tags = []
    for i in range(0, len(data) - SLOT + 1, SLOT):
        raw = data[i:i + SLOT].rstrip(b"\0")
        if raw:
            tag = raw.decode("utf-8", "replace")
            if split_tag(tag) is not None:
                tags.append(tag)
    return tags


async def count_crashes(io, path: str) -> tuple[int, int]:
    """Count a try against each request left running in ``path``, then empty it.

    Returns ``(left, counted)``: the requests found, and those still queued
    (counted).  A Redis failure raises (RedisFailed) and leaves the file as
    it was, for the next attempt.
    """
    tags = left_in(path)
    if not tags:
        return 0, 0
    by_part: dict[int, list[str]] = defaultdict(list)
    for tag in tags:
        p, entry = split_tag(tag)
        by_part[p].append(entry)
    counted = await io.crashed(dict(by_part))
    with open(path, "r+b") as f:
        f.truncate(0)
    return len(tags), counted


class InflightLog:
    """The slot table of one live worker (see the module docstring).

    Opened empty: the caller has counted what a dead predecessor left
    (:func:`count_crashes`) before.  Slots freed are reused, so the file's
    size is the peak of requests running at once times :data:`SLOT`.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        self._free: list[int] = []
        self._size = 0
        self.running = 0
        #: Requests not tracked (a tag too long for a slot: never seen in practice).
        self.untracked = 0

    def start(self, tag: str) -> int | None:
        """A request for the record tagged ``tag`` starts: its slot, or None (not tracked)."""
        data = tag.encode("utf-8")
        if len(data) >= SLOT or self._fd < 0:
            self.untracked += 1
            return None
        slot = self._free.pop() if self._free else self._grow()
        os.pwrite(self._fd, data.ljust(SLOT, b"\0"), slot * SLOT)
        self.running += 1
        return slot

    def _grow(self) -> int:
        slot = self._size
        self._size += 1
        return slot

    def end(self, slot: int | None) -> None:
        """The request in ``slot`` has ended (its outcome applied)."""
        if slot is None or self._fd < 0:
            return
        os.pwrite(self._fd, _FREE, slot * SLOT)
        self._free.append(slot)
        self.running -= 1

    def close(self) -> None:
        """The worker stops; a clean stop has no request running and leaves the file empty."""
        if self._fd < 0:
            return
        if self.running == 0:
            os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = -1
