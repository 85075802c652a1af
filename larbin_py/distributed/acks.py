"""A worker's acks: outcomes held until the output that covers them is durable (sans-I/O).

An entry leaves its partition's stream (``lb_ack``) only once the page it
stands for is safe: its file and index line synced, its links enqueued
(the coordinator puts the enqueues before the acks in one tick).  Acked
earlier, a worker killed before the sync would lose the page for good;
acked later, it is only fetched again.  :class:`AckBuffer` holds the
outcomes on their way, ``(partition, entry id, outcome)``:

``pending``
    ended records (``on_done``: ``fetched`` or a forget reason) not yet
    covered by a durable point of the output;
``ready``
    covered (or with nothing to cover: ``badUrl``, ``workerCrash``): sent
    with the next tick, grouped by partition (:meth:`take_ready`);
``orphans``
    outcomes whose ack was refused because the lease went (lost while Redis
    was away, say), by tag ``<partition>/<entry id>``: if the partition
    comes back to this worker, its claim brings the entry back and the
    outcome is acked instead of the page fetched again (:meth:`orphan`).
    At most :data:`ORPHANS_MAX` are kept (beyond, pages are fetched again).

**The cycle.**  :meth:`take_pending` takes the batch (``syncing`` until
then), the caller syncs the output (beside the ticks: links go on being
sent meanwhile), then :meth:`made_durable` moves the batch to ``ready``
and records the output's position: :meth:`outpos_due` hands it to the tick
that carries those acks, to be stored in ``outpos:<w>`` (a respawn
continues its output from there), once per change.  Outcomes that end
during the sync wait for the next cycle.  A sync that raises loses nothing
but the batch's acks: the worker fails, and those entries stay pending in
Redis for the partition's next owner.

**Faults.**  A tick that failed gives its acks back (:meth:`put_back`, in
front: sent again, acking is idempotent).  A lease lost (:meth:`lost`)
turns that partition's pending and ready outcomes into orphans.  A stop
either flushes everything pending with the last durable point
(:meth:`flush`) or, when the output may not be durable (the worker failed),
drops every outcome not yet sent (:meth:`drop`): their entries stay
pending for the next owner, who fetches them again.

**Recrawl verdicts.**  A recrawl's verdicts for a page (``unchanged``,
``gone``...: larbin_py.recrawl) travel in its outcome, ``fetched;unchanged``
(:meth:`verdict`, told just before or just after the outcome on the same
turn of the loop), and ``lb_ack`` counts them with the ack, once: a page
fetched again after a takeover is counted by the ack that removes it.

**Figures.**  The ``fetched`` outcomes acked are counted (:attr:`pages`)
and reported as deltas to the crawl's ``figures`` hash
(:meth:`pages_to_report`, :meth:`pages_reported`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Iterable

from .inbox import make_tag

__all__ = ["AckBuffer", "Ack", "ORPHANS_MAX"]

#: Most refused outcomes kept for partitions that may come back.
ORPHANS_MAX = 100_000
#: How far back among the pending outcomes a verdict looks for its own (it comes on the
#: same turn of the loop as its outcome: only outcomes ended on the way can be after it).
VERDICT_LOOKBACK = 64

#: One outcome on its way: (partition, entry id, outcome).
Ack = tuple[int, str, str]


class AckBuffer:
    """The outcomes on their way to Redis (see the module docstring)."""

    def __init__(self, *, orphans_max: int = ORPHANS_MAX, now: float = 0.0) -> None:
        self.pending: list[Ack] = []
        #: Taken for the sync under way (a drain waits for them too).
        self.syncing: list[Ack] = []
        #: Outcomes of the sync under way whose lease went meanwhile (orphans already).
        self._dropped: set[Ack] = set()
        self.ready: list[Ack] = []
        self.orphans: dict[str, str] = {}
        self.orphans_max = orphans_max
        #: When the last batch was made durable (the ack cycle's clock).
        self.last_cycle = now
        #: The output's position (JSON) made durable with the last batch, and the last one stored.
        self.outpos: str | None = None
        self._outpos_sent: str | None = None
        #: ``fetched`` outcomes acked, and how many of them the figures have.
        self.pages = 0
        self._pages_reported = 0
        #: Verdicts told before their outcome came (:meth:`verdict`), by (partition, entry).
        self._early: dict[tuple[int, str], str] = {}

    def __bool__(self) -> bool:
        """Outcomes still to send (pending, syncing or ready)."""
        return bool(self.pending or self.syncing or self.ready)

    # --- outcomes in ------------------------------------------------------
    def add(self, p: int, entry: str, outcome: str) -> None:
        """A record ended: acked once the output is durable."""
        if self._early:
            verdicts = self._early.pop((p, entry), None)
            if verdicts is not None:
                outcome = f"{outcome};{verdicts}"
        self.pending.append((p, entry, outcome))

    def verdict(self, p: int, entry: str, verdicts) -> None:
        """A recrawl's ``verdicts`` of the entry whose outcome was just added, or is about to be."""
        joined = ",".join(verdicts)
        pending = self.pending
        for i in range(len(pending) - 1, max(-1, len(pending) - 1 - VERDICT_LOOKBACK), -1):
            q, e, outcome = pending[i]
            if q == p and e == entry:  # (the last one, but for outcomes that ended on the way)
                if ";" not in outcome:
                    pending[i] = (p, entry, f"{outcome};{joined}")
                return
        if len(self._early) < ORPHANS_MAX:
            self._early[(p, entry)] = joined

    def add_ready(self, p: int, entry: str, outcome: str) -> None:
        """An entry with no output to wait for (``badUrl``, ``workerCrash``): sent with the next tick."""
        self.ready.append((p, entry, outcome))

    # --- the cycle --------------------------------------------------------
    def cycle_late(self, now: float, interval: float) -> bool:
        """Outcomes pending and the last cycle ``interval`` s ago or more."""
        return bool(self.pending) and now - self.last_cycle >= interval

    def take_pending(self) -> list[Ack]:
        """The batch the next durable point covers (the caller then syncs the output)."""
        batch, self.pending = self.pending, []
        self.syncing.extend(batch)
        return batch

    def made_durable(self, batch: list[Ack], position: dict | None, now: float) -> None:
        """The output is durable up to ``position`` (None: no position to keep): ``batch`` is ready
        (but for its outcomes whose lease went during the sync: orphans)."""
        if position is not None:
            self.outpos = json.dumps(position, sort_keys=True, separators=(",", ":"))
        dropped = self._dropped
        self.ready.extend(a for a in batch if a not in dropped)
        if self.syncing or dropped:
            done = set(batch)
            self.syncing = [a for a in self.syncing if a not in done]
            self._dropped = dropped - done
        self.last_cycle = now

    def waiting(self) -> set[int]:
        """Partitions with outcomes still waiting for a durable point (a drain waits for them)."""
        return {p for p, _, _ in self.pending} | {p for p, _, _ in self.syncing}

    def take_ready(self) -> tuple[list[Ack], dict[int, list[tuple[str, str]]]]:
        """What the tick sends: the acks taken (to :meth:`put_back` if it fails) and,
        by partition, their ``(entry id, outcome)`` pairs in order."""
        acks, self.ready = self.ready, []
        by_part: dict[int, list[tuple[str, str]]] = defaultdict(list)
        for p, entry, outcome in acks:
            by_part[p].append((entry, outcome))
        return acks, dict(by_part)

    def outpos_due(self) -> str | None:
        """The output position to store with this tick's acks (None: unchanged since stored)."""
        return self.outpos if self.outpos is not None and self.outpos != self._outpos_sent else None

    def outpos_stored(self, position: str) -> None:
        self._outpos_sent = position

    # --- answers and faults ---------------------------------------------------
    def acked(self, pairs: Iterable[tuple[str, str]]) -> None:
        """A tick's ack of ``pairs`` was applied (not fenced)."""
        self.pages += sum(1 for _entry, outcome in pairs if outcome.split(";", 1)[0] == "fetched")

    def put_back(self, acks: list[Ack]) -> None:
        """The tick that carried ``acks`` failed: they go first in the next one."""
        self.ready[:0] = acks

    def lost(self, parts: Iterable[int]) -> int:
        """The leases of ``parts`` are gone: their outcomes not yet acked become orphans
        (while fewer than ``orphans_max`` are kept).  Returns how many left the buffer."""
        gone = set(parts)
        if not gone:
            return 0
        before = len(self.pending) + len(self.ready) + len(self.syncing)
        if len(self.orphans) < self.orphans_max:
            for p, entry, outcome in self.pending + self.ready + self.syncing:
                if p in gone:
                    self.orphans[make_tag(p, entry)] = outcome
        self.pending = [a for a in self.pending if a[0] not in gone]
        self.ready = [a for a in self.ready if a[0] not in gone]
        self._dropped.update(a for a in self.syncing if a[0] in gone)
        self.syncing = [a for a in self.syncing if a[0] not in gone]
        return before - len(self.pending) - len(self.ready) - len(self.syncing)

    def refused(self, p: int, pairs: Iterable[tuple[str, str]]) -> None:
        """An ack of ``p`` refused (fenced: the lease went) or not sent (``p`` no longer held):
        its outcomes become orphans, acked if ``p`` comes back here with these entries."""
        for entry, outcome in pairs:
            if len(self.orphans) >= self.orphans_max:
                return
            self.orphans[make_tag(p, entry)] = outcome

    def orphan(self, p: int, entry: str) -> str | None:
        """A claim brought ``entry`` back: the outcome it had here (then acked, not redone), or None."""
        if not self.orphans:
            return None
        return self.orphans.pop(make_tag(p, entry), None)

    def forget_orphans(self, p: int) -> None:
        """``p``'s claim is done: what it did not bring back was acked or taken elsewhere."""
        if self.orphans:
            prefix = f"{p}/"
            for tag in [t for t in self.orphans if t.startswith(prefix)]:
                del self.orphans[tag]

    # --- a stop -----------------------------------------------------------------
    def flush(self, position: dict | None, now: float) -> None:
        """A clean stop, the output synced up to ``position``: everything pending is ready."""
        self.made_durable(self.take_pending(), position, now)

    def drop(self) -> None:
        """A stop whose output may not be durable: nothing more is acked (the entries
        stay pending for the partitions' next owners)."""
        self.pending = []
        self.ready = []
        self._dropped.update(self.syncing)
        self.syncing = []

    # --- figures ----------------------------------------------------------------
    def pages_to_report(self) -> int:
        return self.pages - self._pages_reported

    def pages_reported(self, n: int) -> None:
        self._pages_reported += n
