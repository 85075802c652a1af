"""The Redis key names of one crawl (docs/distributed.md, "Redis keys").

Every key starts with ``lb:<crawlName>:``, so several crawls share one Redis.
Every key of a partition carries the hash tag ``{p}`` and every key of an IP
the tag ``{X}``: in Redis Cluster all keys one function touches (the
stream, the seen buckets, the counters and the lease of one partition) live
in one slot, so each function call goes to one node.

=======================  ===================================================
key                      what it holds
=======================  ===================================================
``meta``                 hash: partitions, seenBuckets, rules digest and
                         values, created (a joiner must agree)
``members``              zset: worker → lease expiry (ms, Redis's clock)
``member:<w>``           the worker's key, ``PX leaseTtl``
``idle``                 hash: worker → ``"<seq>:<0|1>"`` (termination waves)
``own:{p}``              the partition lease ``"<w>:<token>"``, ``PX leaseTtl``
``fence:{p}``            the fencing token counter (``INCR``)
``q:{p}``                stream, group ``crawl``, one entry per accepted URL
``seen:{p}:<b>``         intset bucket of the URL fingerprints (signed int64)
``cnt:{p}``              hash: accepted, fetched, forgotten:<reason>
``crash:{p}``            hash: entry id → workers that died fetching it
                         (larbin_py.distributed.inflight), dropped at its ack
``robots:{p}``           hash: robots.txt URL → answer (written by the owner;
                         pruned a day after the answer, its cache time)
``sitewait:{p}``         hash: host → next allowed fetch (written at handover)
``ip:{X}``               the IP lease (the holder's worker id), ``PX``
``iplast:{X}``           hash: start (wall ms of the last request), pace
``ipwant:{X}``           a waiter's worker id, ``PX`` (asks the holder to let go)
``stats:<w>``            the worker's stats snapshot (JSON), ``PX``
``outpos:<w>``           the worker's output position at its last ack
``figures``              hash: ``<w>:pages`` (pages acked) and
                         ``<w>:paused:<kind>`` (seconds Redis's failures
                         paused it, by kind), for the launcher's summary
``crashed``              list: the URLs forgotten as workerCrash (newest
                         1,000)
``open``                 URLs accepted and not yet acked, all partitions
                         (lb_enqueue adds, lb_ack takes): 0 is the end's cue
``news:<w>``             set: partitions of worker w that others queued
                         URLs into since w last looked
``expect``               the worker ids the launcher starts together
``loads``                hash: worker → ``"<rate> <backlog> <capacity>"``
``shares``               hash: epoch, at (Redis ms), ``w:<worker>`` → its
                         partition share (load-aware partitions)
=======================  ===================================================
"""

from __future__ import annotations

__all__ = ["Keys", "GROUP", "bucket_of", "signed64"]

#: The consumer group of every partition stream.
GROUP = "crawl"

_U64 = 1 << 64
_I63 = 1 << 63


def signed64(fingerprint: int) -> int:
    """``url.fingerprint`` (unsigned 64-bit) as the signed int64 an intset stores.

    Redis keeps a set in the compact intset encoding only while every member
    is a decimal integer in the int64 range; 2**64 - 1 would turn the bucket
    into a hashtable (56+ B per member instead of 8).
    """
    fingerprint &= _U64 - 1
    return fingerprint - _U64 if fingerprint >= _I63 else fingerprint


def bucket_of(fingerprint: int, buckets: int) -> int:
    """The seen bucket of a fingerprint: its top bits, scaled to ``buckets``.

    Any bucket count works (``(fp * buckets) >> 64``); the host decides the
    partition, the fingerprint only the bucket inside it.
    """
    return ((fingerprint & (_U64 - 1)) * buckets) >> 64


class Keys:
    """Key names under ``lb:<crawl>:``."""

    __slots__ = ("prefix", "crawl")

    def __init__(self, crawl: str) -> None:
        if not crawl or any(c in crawl for c in "{}: \t\r\n"):
            raise ValueError(f"crawlName {crawl!r} must be non-empty, without spaces, ':', '{{' or '}}'")
        self.crawl = crawl
        self.prefix = f"lb:{crawl}:"

    # crawl-wide
    @property
    def meta(self) -> str:
        return self.prefix + "meta"

    @property
    def members(self) -> str:
        return self.prefix + "members"

    @property
    def idle(self) -> str:
        return self.prefix + "idle"

    def member(self, worker: str) -> str:
        return f"{self.prefix}member:{worker}"

    def stats(self, worker: str) -> str:
        return f"{self.prefix}stats:{worker}"

    def outpos(self, worker: str) -> str:
        return f"{self.prefix}outpos:{worker}"

    @property
    def figures(self) -> str:
        return self.prefix + "figures"

    @property
    def crashed(self) -> str:
        return self.prefix + "crashed"

    @property
    def open(self) -> str:
        """URLs accepted and not yet acked, over every partition (lb_enqueue adds, lb_ack takes)."""
        return self.prefix + "open"

    def news(self, worker: str) -> str:
        """Partitions of ``worker`` that other workers queued URLs into since it last looked."""
        return f"{self.prefix}news:{worker}"

    @property
    def expect(self) -> str:
        """The workers the launcher starts together (a worker acquires once it sees them all)."""
        return self.prefix + "expect"

    @property
    def loads(self) -> str:
        """Each worker's measured load (rate, backlog, capacity), written with its heartbeat."""
        return self.prefix + "loads"

    @property
    def shares(self) -> str:
        """The partition shares the map gives the workers (load-aware partitions)."""
        return self.prefix + "shares"

    # per partition: the hash tag {p}
    def own(self, p: int) -> str:
        return f"{self.prefix}own:{{{p}}}"

    def fence(self, p: int) -> str:
        return f"{self.prefix}fence:{{{p}}}"

    def queue(self, p: int) -> str:
        return f"{self.prefix}q:{{{p}}}"

    def seen(self, p: int, bucket: int) -> str:
        return f"{self.prefix}seen:{{{p}}}:{bucket}"

    def counts(self, p: int) -> str:
        return f"{self.prefix}cnt:{{{p}}}"

    def crashes(self, p: int) -> str:
        return f"{self.prefix}crash:{{{p}}}"

    def robots(self, p: int) -> str:
        return f"{self.prefix}robots:{{{p}}}"

    def sitewait(self, p: int) -> str:
        return f"{self.prefix}sitewait:{{{p}}}"

    # per IP: the hash tag {X}
    def ip(self, addr: str) -> str:
        return f"{self.prefix}ip:{{{addr}}}"

    def iplast(self, addr: str) -> str:
        return f"{self.prefix}iplast:{{{addr}}}"

    def ipwant(self, addr: str) -> str:
        return f"{self.prefix}ipwant:{{{addr}}}"

    def pattern(self) -> str:
        """A SCAN pattern for every key of the crawl (its removal, the tests)."""
        return self.prefix + "*"
