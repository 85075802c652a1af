"""Which partitions a worker holds, and in what state: one table of transitions (sans-I/O).

A partition's queue (``q:{p}``) is served by one worker at a time, the
holder of its lease ``own:{p}`` (a fencing token; docs/distributed-design.md,
"Membership, leases and fencing").  :class:`Ownership` keeps, for every
partition this worker deals with, one record: its :class:`PartState`, its
token, when it was last read and whether it may hold more, and the entries
held here (read or claimed, not yet acked).  A partition without a record
is ``FREE``.  The coordinator stages the tick's operations from what this
table answers (:meth:`Ownership.to_acquire`, :meth:`claims`, :meth:`reads`,
:meth:`drained`) and feeds it the answers as events; it never sets a state
itself.  No clock, no I/O: times are arguments.

The states and how they are left (:data:`OWNERSHIP_TRANSITIONS` has every
transition, the answers that leave a state as it is included)::

    FREE        --acquire-->     ACQUIRING   (staged: the map gives it to this worker)
    ACQUIRING   --acquired-->    TO_CLAIM    (or --refused / unanswered--> FREE)
    TO_CLAIM    --claimed-->     CLAIMED     (read answers leave CLAIMED as it is)
    CLAIMED     --unanswered-->  RECLAIM     (a read's answer lost; --claimed--> CLAIMED)
    TO_CLAIM, CLAIMED, RECLAIM  --drain-->  DRAINING
    DRAINING    --release-->     RELEASING   (staged: nothing of it running, no ack left)
    RELEASING   --released-->    FREE        (or --unanswered--> DRAINING)
    any state holding a token   --lost-->   FREE

``ACQUIRING`` and ``RELEASING`` last one tick: the acquire or the release
is in the tick under way.  ``TO_CLAIM``: the token is known; the claim of
every pending entry (with the partition's robots.txt answers and site
waits) goes in the next tick.  ``CLAIMED``: read while the inbox has room.
``RECLAIM``: a read's answer was lost with its tick (it may have been
delivered: its entries would stay pending here for ever), so it is claimed
again, skipping the entries held here; reads go on meanwhile.
``DRAINING``: given away (the map changed, the membership lapsed, a stop):
nothing more is read or claimed; once its running requests have ended and
its acks have gone out, its release is staged.  Every state but ``FREE``
and ``ACQUIRING`` holds a token, renewed by the heartbeat (:meth:`tokens`).

Answers can arrive late: an earlier answer of the same tick (the heartbeat
comes before the claims and reads in a tick) or the membership's watch
while the tick was under way may have moved the partition on.  The table
says what a late answer does: a claim or a read answered for a partition
now ``DRAINING`` or ``FREE`` leaves it there, and the coordinator drops its
entries (they stay pending in Redis for the next owner).  The coordinator
uses a claim's or read's entries only when the event left the partition
readable (:data:`READABLE`).

Errors: an event the table does not allow in the partition's state raises
:class:`~larbin_py.transitions.IllegalTransition` naming the partition, the
state and the event, and changes nothing: it is a bug in the coordinator
(a worker fails loudly on it, and is started again), never something Redis
or another worker can cause.
"""

from __future__ import annotations

from enum import Enum
from typing import Iterable

from ..transitions import step

__all__ = ["PartState", "OWNERSHIP_TRANSITIONS", "HELD", "READABLE", "ACTIVE", "Ownership",
           "READ_MAX", "EMPTY_POLL"]

#: Most entries one fenced read asks of one partition.
READ_MAX = 200
#: How often an owned partition found empty is read again (seconds).
EMPTY_POLL = 0.5


class PartState(Enum):
    FREE = "free"  # not held here (no record)
    ACQUIRING = "acquiring"  # its acquire is in the tick under way
    TO_CLAIM = "to_claim"  # held (a token): its pending entries to take over
    CLAIMED = "claimed"  # held and claimed: read while the inbox has room
    RECLAIM = "reclaim"  # claimed, but a read's answer was lost: claimed again
    DRAINING = "draining"  # given away: released once its requests and acks are done
    RELEASING = "releasing"  # its release is in the tick under way


FREE, ACQUIRING, TO_CLAIM, CLAIMED, RECLAIM, DRAINING, RELEASING = PartState

#: States that hold a fencing token (renewed by the heartbeat).
HELD = frozenset({TO_CLAIM, CLAIMED, RECLAIM, DRAINING, RELEASING})
#: States whose partition is read (and whose claims and reads' entries are crawled).
READABLE = frozenset({CLAIMED, RECLAIM})
#: Held and not given away: what a new map or a lapsed membership may drain.
ACTIVE = frozenset({TO_CLAIM, CLAIMED, RECLAIM})
#: States the worker's idle report waits for (a claim or a release still to come).
UNSETTLED = frozenset({TO_CLAIM, RECLAIM, DRAINING, RELEASING})

#: A partition's ownership: (state, event) -> new state (larbin_py.transitions.step).
OWNERSHIP_TRANSITIONS: dict[tuple[PartState, str], PartState] = {
    (FREE, "acquire"): ACQUIRING,  # the map gives it to this worker: lb_acquire in this tick
    (ACQUIRING, "acquired"): TO_CLAIM,  # a new fencing token
    (ACQUIRING, "refused"): FREE,  # its previous owner still holds it (draining, or not yet expired)
    (ACQUIRING, "unanswered"): FREE,  # the tick failed: asked again later (a new token then)
    (TO_CLAIM, "claimed"): CLAIMED,  # its pending entries are here: read it from now on
    (RECLAIM, "claimed"): CLAIMED,  # (the entries held here were skipped)
    (DRAINING, "claimed"): DRAINING,  # given away meanwhile: the entries stay pending for the next owner
    (FREE, "claimed"): FREE,  # lost earlier in the tick (e.g. a duplicate worker id): same
    (CLAIMED, "read"): CLAIMED,  # new entries
    (RECLAIM, "read"): RECLAIM,
    (DRAINING, "read"): DRAINING,  # given away meanwhile: they stay pending for the next owner
    (FREE, "read"): FREE,  # lost earlier in the tick: same
    (CLAIMED, "unanswered"): RECLAIM,  # a read's answer lost: its entries may be pending here, unseen
    (RECLAIM, "unanswered"): RECLAIM,
    (DRAINING, "unanswered"): DRAINING,  # (a read lost after the drain began: the next owner claims them)
    (TO_CLAIM, "drain"): DRAINING,  # a new map gives it to another worker, the membership lapsed, a stop
    (CLAIMED, "drain"): DRAINING,
    (RECLAIM, "drain"): DRAINING,
    (DRAINING, "release"): RELEASING,  # its requests ended, its acks went: site waits and the fenced DEL
    (RELEASING, "released"): FREE,
    (RELEASING, "unanswered"): DRAINING,  # the tick failed: released at the next one
    (FREE, "released"): FREE,  # lost earlier in the tick: same
    (TO_CLAIM, "lost"): FREE,  # the heartbeat's lost list, or a fenced answer (claim, read, ack)
    (CLAIMED, "lost"): FREE,
    (RECLAIM, "lost"): FREE,
    (DRAINING, "lost"): FREE,
    (RELEASING, "lost"): FREE,
    (FREE, "lost"): FREE,  # a second fenced answer in one tick
}


class _Part:
    """One partition's record (any state but FREE)."""

    __slots__ = ("state", "token", "maybe_full", "polled", "live")

    def __init__(self) -> None:
        self.state = FREE
        self.token: int | None = None
        #: Its last read filled its budget, or links were enqueued since: read it again soon.
        self.maybe_full = False
        #: When it was last read (its owner's clock); one found empty is read every EMPTY_POLL s.
        self.polled = 0.0
        #: Entry ids held here (read or claimed, not yet acked): a claim again skips them.
        self.live: set[str] = set()


class Ownership:
    """The partitions of one worker and their states (see the module docstring)."""

    def __init__(self, *, poll: float = EMPTY_POLL) -> None:
        self._parts: dict[int, _Part] = {}
        #: How often a readable partition found empty is read again (seconds): a safety
        #: net when the news of other workers' links are told (the coordinator's news).
        self.poll = poll
        #: Leases acquired (the coordinator's ``takeovers``).
        self.acquisitions = 0

    # --- states ------------------------------------------------------------
    def state(self, p: int) -> PartState:
        part = self._parts.get(p)
        return FREE if part is None else part.state

    def event(self, p: int, event: str, token: int | None = None) -> PartState:
        """Apply ``event`` to partition ``p`` (``token``: the ``acquired`` one's): its new state.

        Raises IllegalTransition when :data:`OWNERSHIP_TRANSITIONS` does not
        allow ``event`` in ``p``'s state (nothing changes then)."""
        part = self._parts.get(p)
        old = FREE if part is None else part.state
        new = step(OWNERSHIP_TRANSITIONS, old, event, f"partition {p}")
        if new is FREE:
            self._parts.pop(p, None)
            return new
        if part is None:
            part = self._parts[p] = _Part()
        part.state = new
        if event == "acquired":
            part.token = token
            self.acquisitions += 1
        elif event == "claimed" and new is CLAIMED:
            part.maybe_full = True  # what it holds is not known yet
        elif new is DRAINING and old is not DRAINING:
            part.maybe_full = False
            part.live.clear()  # its URLs leave the frontier: none is held here any more
        return new

    def events(self, parts: Iterable[int], event: str) -> list[int]:
        """Apply ``event`` to each of ``parts``; returns those it moved to another state."""
        moved = []
        for p in parts:
            old = self.state(p)
            if self.event(p, event) is not old:
                moved.append(p)
        return moved

    def where(self, states: Iterable[PartState]) -> list[int]:
        """The partitions in one of ``states`` (never FREE), in order."""
        states = frozenset(states)
        return sorted(p for p, part in self._parts.items() if part.state in states)

    def count(self, states: Iterable[PartState]) -> int:
        states = frozenset(states)
        return sum(1 for part in self._parts.values() if part.state in states)

    def tokens(self) -> dict[int, int]:
        """``{partition: token}`` of the held partitions: what the heartbeat renews."""
        return {p: part.token for p, part in self._parts.items() if part.state in HELD}

    def token(self, p: int) -> int | None:
        """``p``'s fencing token while held, else None (a fenced call would be refused)."""
        part = self._parts.get(p)
        return part.token if part is not None and part.state in HELD else None

    def unsettled(self) -> bool:
        """A claim or a release is still to come (the worker is not idle)."""
        return any(part.state in UNSETTLED for part in self._parts.values())

    # --- what the next tick sends -----------------------------------------
    def to_acquire(self, mine: Iterable[int]) -> list[int]:
        """Of ``mine`` (what the map gives this worker), those to acquire: the FREE ones."""
        return sorted(p for p in mine if p not in self._parts)

    def claims(self) -> list[tuple[int, int]]:
        """``(partition, token)`` of those to claim (TO_CLAIM, RECLAIM)."""
        return [(p, part.token) for p, part in sorted(self._parts.items()) if part.state in (TO_CLAIM, RECLAIM)]

    def drained(self, busy: set[int], waiting: set[int]) -> list[int]:
        """The DRAINING partitions neither ``busy`` (a request of theirs running) nor
        ``waiting`` (an ack of theirs not yet sent): their release is due."""
        return [p for p in self.where((DRAINING,)) if p not in busy and p not in waiting]

    def wants_reads(self) -> bool:
        """A readable partition may hold more than its last read brought."""
        return any(part.maybe_full for part in self._parts.values() if part.state in READABLE)

    def polls_due(self, now: float) -> bool:
        """A readable partition found empty has not been read for :attr:`poll` s."""
        return any(now - part.polled >= self.poll for part in self._parts.values()
                   if part.state in READABLE and not part.maybe_full)

    def reads(self, now: float, budget: int) -> list[tuple[int, int, int]]:
        """The reads of this tick, ``(partition, token, count)``, ``budget`` entries split
        between the readable partitions that may hold more or whose poll is due (at most
        :data:`READ_MAX` each, at least 1); each is marked read at ``now``."""
        parts = [(p, part) for p, part in sorted(self._parts.items()) if part.state in READABLE
                 and (part.maybe_full or now - part.polled >= self.poll)]
        if budget <= 0 or not parts:
            return []
        each = max(1, min(READ_MAX, budget // len(parts)))
        for _p, part in parts:
            part.polled = now
        return [(p, part.token, each) for p, part in parts]

    # --- answers --------------------------------------------------------------
    def read_answered(self, p: int, got: int, asked: int) -> None:
        """A read brought ``got`` of ``asked`` entries: fewer means the stream is drained for now."""
        part = self._parts.get(p)
        if part is not None and part.state in READABLE:
            part.maybe_full = got >= asked

    def enqueued(self, p: int) -> None:
        """New entries may be queued in ``p``'s stream (this worker's links, or another
        worker's news): read it again soon."""
        part = self._parts.get(p)
        if part is not None and part.state in READABLE:
            part.maybe_full = True

    def unanswered(self, read: Iterable[int]) -> list[int]:
        """The tick under way failed: ``unanswered`` to the partitions it acquired,
        released or (``read``) read; returns those moved."""
        staged = set(read) | {p for p, part in self._parts.items() if part.state in (ACQUIRING, RELEASING)}
        return self.events(sorted(staged), "unanswered")

    # --- entries held here ---------------------------------------------------
    def hold(self, p: int, entry: str) -> None:
        part = self._parts.get(p)
        if part is not None and part.state in READABLE:
            part.live.add(entry)

    def holds(self, p: int, entry: str) -> bool:
        part = self._parts.get(p)
        return part is not None and entry in part.live

    def let_go(self, p: int, entry: str) -> None:
        """``entry`` was acked: no longer held here."""
        part = self._parts.get(p)
        if part is not None:
            part.live.discard(entry)
