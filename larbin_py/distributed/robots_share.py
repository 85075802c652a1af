"""robots.txt answers shared through ``robots:{p}`` (sans-I/O: wall times are arguments).

A worker that fetched a host's robots.txt stores the answer in its
partition's hash, so the partition's next owner does not fetch it again
(a takeover loads the hash with the claim).  An answer is kept for its
cache time (:data:`larbin_py.robots.CACHE_TTL`, a day) from when it was
fetched, then removed: by the owner, which keeps a heap of the expiries of
what it wrote or loaded and prunes the expired ones of the partitions it
still holds at each heartbeat, and at a takeover for those found expired.
An answer renewed meanwhile (fetched again) keeps its newer expiry: the
older heap item is skipped.

The blob: ``A<wall>\\n`` (no restriction: robots.txt absent) or
``B<wall>\\n<body>``.  A blob whose time does not parse is skipped.
:class:`RobotsShare` holds what the next tick writes (:attr:`out`) and
prunes (:meth:`take_prune`); the coordinator sends both fenced, for the
partitions it holds only (the others' are dropped: their next owner
decides).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from typing import Container

from .. import robots as robots_mod

__all__ = ["RobotsShare", "encode", "decode"]


def encode(when: float, body: bytes | None) -> bytes:
    """The blob of an answer fetched at wall time ``when`` (``body`` None: no restriction)."""
    return (b"A%r\n" % when) if body is None else (b"B%r\n" % when) + body


def decode(blob: bytes) -> tuple[float, bytes | None] | None:
    """``(when, body)`` of a blob (``body`` None: no restriction), or None when its time does not parse."""
    kind, _, rest = blob.partition(b"\n")
    try:
        when = float(kind[1:])
    except ValueError:
        return None
    return when, (rest if kind[:1] == b"B" else None)


class RobotsShare:
    """The answers on their way to ``robots:{p}`` and their expiries (see the module docstring)."""

    def __init__(self) -> None:
        #: Answers to write, by partition: robots URL -> blob.
        self.out: dict[int, dict[str, bytes]] = defaultdict(dict)
        self._prune: dict[int, list[str]] = defaultdict(list)
        self._heap: list[tuple[float, int, str]] = []  # (expiry wall time, partition, URL)
        self._expiry: dict[str, float] = {}  # the expiry in force per URL
        #: Answers loaded at takeovers, and answers removed from Redis.
        self.loaded = 0
        self.pruned = 0

    def answer(self, p: int, url: str, when: float, body: bytes | None) -> None:
        """This worker fetched ``url`` (partition ``p``) at wall time ``when``."""
        self.out[p][url] = encode(when, body)
        self._held(p, url, when + robots_mod.CACHE_TTL)

    def _held(self, p: int, url: str, expiry: float) -> None:
        self._expiry[url] = expiry
        heapq.heappush(self._heap, (expiry, p, url))

    def take_out(self) -> dict[int, dict[str, bytes]]:
        out, self.out = self.out, defaultdict(dict)
        return out

    def load(self, p: int, answers: dict[str, bytes], wall: float) -> list[tuple[str, robots_mod.RobotsTxt, float]]:
        """A takeover read ``robots:{p}``: ``(url, rules, seconds left)`` of the live answers;
        the expired ones are pruned with the next tick."""
        live = []
        for url, blob in answers.items():
            parsed = decode(blob)
            if parsed is None:
                continue
            when, body = parsed
            left = when + robots_mod.CACHE_TTL - wall
            if left <= 0:
                self._prune[p].append(url)
                continue
            self._held(p, url, when + robots_mod.CACHE_TTL)
            rules = robots_mod.RobotsTxt.parse(body) if body is not None else robots_mod.RobotsTxt.allow_all()
            live.append((url, rules, left))
            self.loaded += 1
        return live

    def expire(self, wall: float, held: Container[int]) -> None:
        """The answers whose day is over, of the partitions still ``held``: pruned with the next tick."""
        heap = self._heap
        while heap and heap[0][0] <= wall:
            expiry, p, url = heapq.heappop(heap)
            if self._expiry.get(url) == expiry:
                del self._expiry[url]
                if p in held:
                    self._prune[p].append(url)

    def take_prune(self) -> dict[int, list[str]]:
        prune, self._prune = self._prune, defaultdict(list)
        return prune

    def count_pruned(self, n: int) -> None:
        """A prune removed ``n`` answers from Redis."""
        self.pruned += n

    def put_back(self, prune: dict[int, list[str]]) -> None:
        """The tick that carried ``prune`` failed: pruned with the next one."""
        for p, urls in prune.items():
            self._prune[p].extend(urls)
