"""RedisSink: where a worker's admitted links go, buffered per partition.

The frontier's :meth:`~larbin_py.frontier.admission.Admission.offer` applies
the rules and the cache of links met lately (``SeenUrls``), then hands the
links here instead of testing them against a local seen store: the owner of
a link's host decides, exactly and atomically, in Redis (``lb_enqueue``:
SADD into the partition's seen bucket, XADD to its stream when new).  The
coordinator's tick takes the buffers (:meth:`take`) and sends them in its
one pipeline, before the acks of the pages they came from: Redis runs the
pipeline in order, so a page is acked only once its links are safe.

A link is remembered by the local cache once it is buffered here; a crash
before the flush leaves its page un-acked, so the page is fetched again and
the link offered again: every "seen" answer of the cache stays exact.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Callable, Sequence

from ..url import authority_of, fingerprint
from .partition import partition_of

__all__ = ["RedisSink", "encode_entry", "decode_entry"]


def encode_entry(url: str, depth: int, retries: int, hops: int = 0, via: str = "", prev: str = "") -> bytes:
    """A stream entry's record: ``depth retries hops url [via [prev]]`` (none holds a space;
    ``via``: a sitemap file or a page a sitemap listed, see UrlRecord; ``prev``: a recrawl's
    token, larbin_py.records, with the worker whose links log it names: ``via`` is then
    written even when empty, so the entry ends ``url  token``)."""
    if prev:
        text = f"{depth} {retries} {hops} {url} {via} {prev}"
    else:
        text = f"{depth} {retries} {hops} {url} {via}" if via else f"{depth} {retries} {hops} {url}"
    return text.encode("utf-8", "surrogateescape")


def decode_entry(data: bytes) -> tuple[str, int, int, int, str, str] | None:
    """``(url, depth, retries, hops, via, prev)`` of an entry's record, None when malformed."""
    try:
        fields = data.split(b" ", 5)
        depth, retries, hops, url = fields[:4]
        via = fields[4].decode("utf-8", "surrogateescape") if len(fields) >= 5 else ""
        prev = fields[5].decode("utf-8", "surrogateescape") if len(fields) == 6 else ""
        return url.decode("utf-8", "surrogateescape"), int(depth), int(retries), int(hops), via, prev
    except ValueError:
        return None


class RedisSink:
    """Admitted links buffered per partition until the next tick.

    ``wake`` is called when a link comes into empty buffers (the tick is
    then due within ``redisFlushInterval``, sooner when the frontier runs
    dry) and when the buffers reach ``batch`` links (the tick sends them at
    once); ``clock`` (monotonic seconds) dates the oldest buffered link.
    """

    def __init__(self, partitions: int, *, retries: int = 0, batch: int = 1000,
                 wake: Callable[[], None] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.partitions = partitions
        self.retries = retries
        self.batch = batch
        self.wake = wake
        self.clock = clock
        self._buf: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        self.pending = 0  # links buffered
        self.oldest: float | None = None  # when the oldest buffered link came
        self.sent = 0  # links handed to a tick
        self.bad = 0  # links with no host (never queued: the rules refuse them first)

    def partition_of_url(self, url: str) -> int | None:
        parts = authority_of(url)
        return None if parts is None else partition_of(parts[2], self.partitions)

    def add_many(self, links: Sequence[str], depths: Sequence[int], hops: int = 0, via: str = "",
                 seen_key: str = "") -> None:
        """Buffer admitted links with their depths (``hops``: redirects that led to them; ``via``:
        see UrlRecord; ``seen_key``: appended to each link for its seen test, a sitemap file's)."""
        buf = self._buf
        retries = self.retries
        n = 0
        for link, depth in zip(links, depths):
            p = self.partition_of_url(link)
            if p is None:
                self.bad += 1
                continue
            buf[p].append((fingerprint(link + seen_key), encode_entry(link, depth, retries, hops, via)))
            n += 1
        if n:
            first = self.oldest is None
            if first:
                self.oldest = self.clock()
            self.pending += n
            if (first or self.pending >= self.batch) and self.wake is not None:
                self.wake()  # the first link dates the flush; a full batch goes at once

    def take(self) -> dict[int, list[tuple[int, bytes]]]:
        """The buffers, emptied: ``{partition: [(fingerprint, record), ...]}``."""
        out, self._buf = self._buf, defaultdict(list)
        self.sent += self.pending
        self.pending = 0
        self.oldest = None
        return dict(out)

    def put_back(self, taken: dict[int, list[tuple[int, bytes]]]) -> None:
        """A tick that failed (Redis unreachable): its links wait for the next one."""
        for p, items in taken.items():
            self._buf[p][:0] = items
            self.pending += len(items)
            self.sent -= len(items)
        if self.pending and self.oldest is None:
            self.oldest = self.clock()
