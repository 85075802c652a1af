"""The seams of the frontier and the engine: what can be swapped, as Protocols.

The embedded crawler implements each with a local part; the distributed
mode implements the main lane and the seen test on Redis (docs/distributed-worker.md); tests use the
fakes of :mod:`larbin_py.testing.fakes`.  Each Protocol lists exactly what
its caller uses, no more: a new implementation needs only these members.

* :class:`SeenStore`: :class:`~larbin_py.frontier.seen.SeenSet`, called by
  :meth:`Admission.offer <larbin_py.frontier.admission.Admission.offer>`.
* :class:`LinkSink`: :class:`larbin_py.distributed.sink.RedisSink`, where
  the distributed mode's admission sends the links it admits.
* :class:`UrlQueue`: :class:`~larbin_py.frontier.store.UrlStore`, the three
  :class:`~larbin_py.frontier.lanes.Lanes` of the frontier, built by a
  :data:`StoreFactory`.
* :class:`Resolver`: :class:`larbin_py.net.dns.Resolver`, called by the engine.
* :class:`Fetcher`: :class:`larbin_py.net.http.Fetcher`, called by the engine.

All are driven from the event loop's thread, and no call may wait on the
network: a remote implementation keeps a local cache and fills it
asynchronously (the frontier calls ``pop`` inside its synchronous ``load``).  Errors are values where
the crawl goes on (a failed DNS answer, a fetch error); an ``OSError`` from a
store means the crawl state cannot be written and stops the crawl cleanly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, Sequence, runtime_checkable

from .store import UrlRecord

if TYPE_CHECKING:  # the edge's result types; the frontier never imports the edge
    from ..net.dns import DNSAnswer
    from ..net.http import FetchResult

__all__ = ["SeenStore", "LinkSink", "UrlQueue", "StoreFactory", "Resolver", "Fetcher"]


@runtime_checkable
class SeenStore(Protocol):
    """The URL-seen test: 64-bit fingerprints (:func:`larbin_py.url.fingerprint`) ever queued.

    A fingerprint once added is never forgotten (the frontier's cache of
    lately met links, :class:`~larbin_py.frontier.seen.SeenUrls`, relies on
    it).  Crash order: the frontier's URL stores are flushed *before* the seen
    store, so that a fingerprint made durable always has its URL durable too
    (after a crash a URL may be queued twice, never lost).
    """

    def add_many(self, fps: Sequence[int]) -> list[bool]:
        """Test-and-add each of ``fps`` in order: True where it was new.

        One call per page's links: a remote store answers it in one round
        trip (and one atomic step with the queueing of the new URLs).
        A fingerprint repeated within ``fps`` is new at most once.
        """
        ...

    def __len__(self) -> int:
        """Fingerprints held (the stats' ``urls.seen``)."""
        ...

    def flush(self, sync: bool = False) -> None:
        """Make what was added durable as far as the store goes (``sync``: on disk)."""
        ...

    def close(self) -> None:
        """Flush and release (idempotent)."""
        ...


@runtime_checkable
class LinkSink(Protocol):
    """Where admitted links go instead of the seen test and the main lane (the distributed mode).

    The owner of each link's host tests and queues it (exactly, in Redis);
    the admission remembers a link in its cache of lately met links once it
    is handed here, so ``add_many`` must not lose what it accepted.
    """

    def add_many(self, links: Sequence[str], depths: Sequence[int], hops: int = 0, via: str = "",
                 seen_key: str = "") -> None:
        """Take ``links`` (normalized, admitted by the rules) with their depths
        and the redirects (``hops``) that led to them; ``via`` (UrlRecord's) and
        ``seen_key`` (appended to each link for its seen test) for a sitemap's URLs."""
        ...


@runtime_checkable
class UrlQueue(Protocol):
    """One FIFO lane of URL records (the frontier has three: main, priority, wait).

    Records come out in the order they went in.  ``pop`` is synchronous: an
    implementation keeps a window of records in RAM (``in_memory``) and the
    rest elsewhere (``on_disk_only``: on disk, or in Redis).  Positions are
    opaque pairs, JSON-ready, that a checkpoint stores and a restart gives
    back to the factory; ``release_through`` lets go of what a durable
    checkpoint no longer needs.
    """

    corrupt_records: int  # records lost to damage (a torn segment), counted once

    def push(self, rec: UrlRecord) -> None:
        """Append ``rec`` (buffered: durable at the next ``flush``)."""
        ...

    def pop(self) -> UrlRecord | None:
        """The oldest record; None when one was lost to damage (call ``len`` first)."""
        ...

    def __len__(self) -> int:
        """Records pushed and not popped."""
        ...

    @property
    def in_memory(self) -> int:
        """Records held in RAM (the window ``pop`` reads from)."""
        ...

    @property
    def on_disk_only(self) -> int:
        """Records held only outside RAM."""
        ...

    def flush(self, sync: bool = False) -> None:
        """Write out what was pushed (``sync``: on disk too)."""
        ...

    def read_position(self) -> tuple[int, int]:
        """Where the first record not yet in the RAM window is (checkpoints)."""
        ...

    def write_position(self) -> tuple[int, int]:
        """Where the next record pushed goes (checkpoints, commits)."""
        ...

    def release_through(self, segment: int) -> int:
        """Drop what lies before read position ``segment`` (a durable checkpoint); how many units freed."""
        ...

    def ram_records(self) -> Iterable[UrlRecord]:
        """The records of the RAM window, oldest first (a checkpoint carries them)."""
        ...

    def close(self) -> None:
        """Flush and release (idempotent)."""
        ...


#: Builds one lane: ``factory(name, ram_urls)`` with ``name`` one of
#: ``"main"``, ``"priority"``, ``"wait"`` and ``ram_urls`` its share of the
#: RAM budget.  The default (:func:`larbin_py.frontier.lanes.disk_stores`)
#: opens :class:`~larbin_py.frontier.store.UrlStore` segments in stateDir.
StoreFactory = Callable[[str, int], UrlQueue]


@runtime_checkable
class Resolver(Protocol):
    """Host names to addresses (IPv4, IPv6 with ``ipVersion``), for the engine
    (:class:`larbin_py.net.dns.Resolver`).

    ``resolve`` never raises (except CancelledError): a failure is an answer
    with ``error`` set (``noDNS``-class reasons, see net/dns.py) and its
    ``ttl`` says how long it holds.  Many calls may run at once; an
    implementation bounds its own queries in flight.
    """

    stats: Any  # counters the stats page reads: in_flight, queued, queries_sent, cache_hits, failures

    async def resolve(self, name: str) -> "DNSAnswer":
        """``name``'s addresses (``ips`` non-empty exactly when ``error`` is None) and their ``ttl``."""
        ...

    def close(self) -> None:
        """Stop: pending resolves end with an error answer (idempotent)."""
        ...


@runtime_checkable
class Fetcher(Protocol):
    """One HTTP request at a time per call, for the engine (:class:`larbin_py.net.http.Fetcher`).

    ``fetch`` never raises (except CancelledError): transport failures come
    back in ``FetchResult.error`` (``noConnection``, ``timeout``, ``reset``,
    ``tooBig``...), with whatever of the answer arrived.  Politeness is not
    its business: the frontier says when a request may start.
    """

    stats: Any  # a dict: connections_opened, reuses, h11_handovers, requests, bytes, errors

    async def fetch(self, url: str, ip: str, port: int, *, cookie: bytes | None = None,
                    addresses=()) -> "FetchResult":
        """GET ``url`` from ``ip:port`` (``cookie``: a Cookie header's value; ``addresses``: the
        host's other addresses, for Happy Eyeballs)."""
        ...

    async def close(self) -> None:
        """Close every connection; fetches in flight end with ``reset``."""
        ...
