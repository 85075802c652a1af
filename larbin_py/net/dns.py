"""Asynchronous DNS for the crawler: c-ares (pycares) driven by the event loop.

:class:`Resolver` is Larbin's DNS fetcher in asyncio form.  ``await
resolver.resolve(name)`` returns a :class:`DNSAnswer` -- the addresses of
``name`` or a typed error -- and never raises (except ``CancelledError``).

How it works
------------
* **One c-ares channel, no threads.**  The channel is created with a
  ``sock_state_cb``: c-ares reports the sockets it wants watched and the
  resolver registers them with ``loop.add_reader`` / ``loop.add_writer``; when
  one is ready it calls ``process_fd``.  A single ``loop.call_at`` timer, armed
  from ``channel.timeout()``, lets c-ares run its retransmissions and
  timeouts.  (pycares 5 starts c-ares' own event thread only when no
  ``sock_state_cb`` is given; its one helper thread exists solely to destroy
  closed channels and never touches our sockets.)
* **Per-try timeout is bounded.**  c-ares >= 1.32 adapts its per-try timeout to
  the server's measured latency (between 250 ms and 5 s) and doubles it on each
  round; the channel's maximum is set to ``timeout`` so a query fails with
  ``"timeout"`` after at most about ``timeout * tries`` seconds per server.
* **c-ares' own query cache is disabled**: this module's cache is the only one,
  so its size bound and TTL policy are the ones that hold.
* **Socket buffers.**  c-ares multiplexes all UDP queries to a server on one
  socket; its receive buffer is raised to 1 MiB so that a burst of answers to
  a full window is not dropped by the kernel (which would cost a retry).
* **Batching.**  At most ``max_in_flight`` queries are outstanding in c-ares;
  more wait in a FIFO queue and are sent as answers come back.
* **Coalescing.**  Concurrent ``resolve()`` calls for one name share one query.
* **Cache.**  Successful answers are kept for their TTL clamped to
  ``[min_ttl, valid_time]`` (the TTL of an answer is the smallest TTL among
  the CNAME and A records used); ``nxdomain``, ``servfail``, ``refused`` and
  ``badAnswer`` for ``negative_ttl``; ``timeout`` for ``timeout_ttl`` (default
  0: not cached, so the crawler's DNS retry really asks again).  The cache is
  an LRU bounded by ``max_cache`` entries; expired entries are dropped when
  met.  Time comes from the injected ``clock``.
* **Names** are normalized: surrounding white space and a trailing dot
  stripped, lower-cased, non-ASCII names IDNA-encoded.  Literal IPv4 and IPv6
  addresses (``"10.0.0.1"``, ``"::1"``, ``"[::1]"``) bypass DNS.

Address families (``ip_version``, larbin.conf ``ipVersion``)
    ``"4"`` asks A records only, ``"6"`` AAAA only, ``"any"`` both: two
    queries per name, sent together (each takes a slot of
    ``max_in_flight``), answered as one.  The addresses come IPv6 first,
    the families interleaved (RFC 8305 section 4: ``v6, v4, v6, v4...``),
    so the first address is the one Happy Eyeballs tries first
    (larbin_py.net.connect).  The answer succeeds when either family has an
    address; its TTL is the smaller of the two that answered.  When neither
    has, the error is the more telling of the two (``timeout`` before
    ``servfail``, ``refused``, ``badAnswer``, then ``nxdomain``: a family
    that has no record says less than one that failed).  A name with
    addresses of the other family only yields ``"nxdomain"`` under ``"4"``
    or ``"6"`` (no usable address), like a name that does not exist.  CNAME
    chains inside the answer are followed to the final records.

Errors (module constants) and what produces them:

==============  =============================================================
``nxdomain``    NXDOMAIN; NOERROR without A (AAAA) records; an invalid name
                (not sent to the server)
``servfail``    SERVFAIL (after c-ares' retries)
``timeout``     no answer within the retries; server unreachable
``refused``     REFUSED / NOTIMP / FORMERR from the server; resolver closed
``badAnswer``   a reply that does not parse, or has no A record for the
                name's CNAME chain although the server claimed success
==============  =============================================================
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import idna
import pycares

__all__ = [
    "Resolver",
    "DNSAnswer",
    "ResolverStats",
    "NXDOMAIN",
    "SERVFAIL",
    "TIMEOUT",
    "REFUSED",
    "BAD_ANSWER",
    "ERRORS",
    "normalize_name",
]

NXDOMAIN = "nxdomain"
SERVFAIL = "servfail"
TIMEOUT = "timeout"
REFUSED = "refused"
BAD_ANSWER = "badAnswer"
#: Every value ``DNSAnswer.error`` can take besides None.
ERRORS = (NXDOMAIN, SERVFAIL, TIMEOUT, REFUSED, BAD_ANSWER)

_E = pycares.errno
_STATUS_TO_ERROR = {
    _E.ARES_ENOTFOUND: NXDOMAIN,
    _E.ARES_ENODATA: NXDOMAIN,
    _E.ARES_EBADNAME: NXDOMAIN,
    _E.ARES_ESERVFAIL: SERVFAIL,
    _E.ARES_ETIMEOUT: TIMEOUT,
    _E.ARES_ECONNREFUSED: TIMEOUT,
    _E.ARES_EREFUSED: REFUSED,
    _E.ARES_ENOTIMP: REFUSED,
    _E.ARES_EFORMERR: REFUSED,
    _E.ARES_ECANCELLED: REFUSED,
    _E.ARES_EDESTRUCTION: REFUSED,
    _E.ARES_EBADRESP: BAD_ANSWER,
}
_SOCKET_BAD = pycares.ARES_SOCKET_BAD
_QUERY_A = pycares.QUERY_TYPE_A
_TYPE_A = pycares.QUERY_TYPE_A
_TYPE_AAAA = pycares.QUERY_TYPE_AAAA
_TYPE_CNAME = pycares.QUERY_TYPE_CNAME
#: ``ip_version`` -> the record types asked, in the order the addresses are listed.
IP_VERSIONS: dict[str, tuple[int, ...]] = {"4": (_TYPE_A,), "6": (_TYPE_AAAA,), "any": (_TYPE_AAAA, _TYPE_A)}
#: Which failure a two-family answer reports when neither family has an address.
_ERROR_RANK = {TIMEOUT: 0, SERVFAIL: 1, REFUSED: 2, BAD_ANSWER: 3, NXDOMAIN: 4}
_MAX_CNAME_HOPS = 16
# Receive buffer of c-ares' sockets: a full window of answers arriving at once
# must not overflow it (the kernel caps it at net.core.rmem_max).
_RCVBUF = 1 << 20
# Labels of 1..63 letters, digits, '-' or '_' (the characters a URL host can
# carry to DNS); anything else -- spaces, NULs, backslash escapes -- would be
# sent to c-ares as a different name than the one asked, so it is refused.
_NAME_RE = re.compile(r"[a-z0-9_-]{1,63}(?:\.[a-z0-9_-]{1,63})*")


@dataclass(frozen=True, slots=True)
class DNSAnswer:
    """The outcome of one ``resolve()``.

    ``ips`` is non-empty exactly when ``error`` is None.  ``ttl`` is how long
    the outcome stays valid (seconds remaining when ``from_cache``; 0 for an
    uncached failure).
    """

    name: str
    ips: tuple[str, ...]
    error: str | None
    ttl: float
    from_cache: bool

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(slots=True)
class ResolverStats:
    """Live counters of a :class:`Resolver` (read them, don't write them)."""

    queries_sent: int = 0          # queries handed to c-ares
    answers: int = 0               # queries that came back with addresses
    cache_hits: int = 0            # resolve() answered from the cache
    coalesced: int = 0             # resolve() that joined a pending query
    literals: int = 0              # resolve() of a literal IP address
    in_flight: int = 0             # queries outstanding in c-ares now
    peak_in_flight: int = 0
    queued: int = 0                # queries waiting for a slot now
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ERRORS, 0))

    def as_dict(self) -> dict:
        return {
            "queries_sent": self.queries_sent,
            "answers": self.answers,
            "cache_hits": self.cache_hits,
            "coalesced": self.coalesced,
            "literals": self.literals,
            "in_flight": self.in_flight,
            "peak_in_flight": self.peak_in_flight,
            "queued": self.queued,
            "failures": dict(self.failures),
        }


def normalize_name(name: str) -> str | None:
    """Lower-case ASCII form of a host name, or None if it cannot be a DNS name.

    Strips white space and one trailing dot, IDNA-encodes non-ASCII names,
    checks label (1..63) and name (<= 253) lengths and the character set
    (letters, digits, ``-``, ``_``).
    """
    name = name.strip()
    if name.endswith("."):
        name = name[:-1]
    if not name.isascii():
        try:
            name = idna.encode(name, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError, ValueError):
            return None
    name = name.lower()
    if len(name) > 253 or _NAME_RE.fullmatch(name) is None:
        return None
    return name


def _literal_ip(name: str) -> str | None:
    """The canonical text of ``name`` if it is an IPv4/IPv6 literal, else None."""
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    elif not (name[:1].isdigit() or ":" in name):
        return None
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return None


def _ares_opt(name: str, bit: int) -> int:
    return getattr(pycares._lib, name, 1 << bit)


class _LoopChannel(pycares.Channel):
    """A pycares Channel whose options pycares 5 does not expose.

    Sets, besides timeout / tries / sock_state_cb: ``maxtimeout`` (so c-ares'
    latency-adaptive per-try timeout never exceeds ``timeout``) and
    ``qcache_max_ttl = 0`` (c-ares' query cache off).  It fills the same
    private fields ``pycares.Channel.__init__`` does (pinned: pycares 5.x), so
    every Channel method works unchanged.
    """

    def __init__(self, *, sock_state_cb, timeout: float, tries: int) -> None:
        lib, ffi = pycares._lib, pycares._ffi
        self._channel = None
        self._lock = threading.RLock()  # pycares' own per-channel lock type
        self._flags = 0
        handle = ffi.new_handle(sock_state_cb)
        self._sock_state_cb_handle = handle
        options = ffi.new("struct ares_options *")
        timeout_ms = max(1, int(timeout * 1000))
        options.timeout = timeout_ms
        options.maxtimeout = timeout_ms
        options.tries = tries
        options.qcache_max_ttl = 0
        options.socket_receive_buffer_size = _RCVBUF
        options.sock_state_cb = lib._sock_state_cb
        options.sock_state_cb_data = handle
        mask = (
            lib.ARES_OPT_TIMEOUTMS
            | lib.ARES_OPT_TRIES
            | lib.ARES_OPT_SOCK_STATE_CB
            | lib.ARES_OPT_SOCK_RCVBUF
            | _ares_opt("ARES_OPT_MAXTIMEOUTMS", 20)
            | _ares_opt("ARES_OPT_QUERY_CACHE", 21)
        )
        channel = ffi.new("ares_channel *")
        if lib.ares_init_options(channel, options, mask) != lib.ARES_SUCCESS:
            raise pycares.AresError("Failed to initialize c-ares channel")
        self._channel = channel
        pycares._shutdown_manager.start()


def _open_channel(sock_state_cb, timeout: float, tries: int) -> pycares.Channel:
    """A loop-driven channel; plain pycares.Channel if pycares' internals moved."""
    if pycares.__version__.split(".")[0] == "5" and hasattr(pycares, "_shutdown_manager"):
        try:
            return _LoopChannel(sock_state_cb=sock_state_cb, timeout=timeout, tries=tries)
        except (AttributeError, TypeError, pycares.AresError):
            pass
    return pycares.Channel(sock_state_cb=sock_state_cb, timeout=timeout, tries=tries,
                           socket_receive_buffer_size=_RCVBUF)


class _Entry:
    __slots__ = ("ips", "error", "expires", "ttl")

    def __init__(self, ips: tuple[str, ...], error: str | None, expires: float, ttl: float):
        self.ips = ips
        self.error = error
        self.expires = expires
        self.ttl = ttl


class Resolver:
    """Batched, caching, coalescing DNS resolver on the running event loop.

    ``servers`` are ``(ip, port)`` pairs (IPv4 or IPv6).  Create it inside the
    loop that will use it (or before its first ``resolve()``; the loop is bound
    lazily).  Call :meth:`close` when done.
    """

    def __init__(
        self,
        servers: Sequence[tuple[str, int]],
        *,
        max_in_flight: int = 50,
        timeout: float = 5.0,
        tries: int = 2,
        valid_time: float = 172800.0,
        min_ttl: float = 60.0,
        negative_ttl: float = 60.0,
        timeout_ttl: float = 0.0,
        max_cache: int = 1_000_000,
        ip_version: str = "4",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not servers:
            raise ValueError("Resolver needs at least one DNS server")
        if ip_version not in IP_VERSIONS:
            raise ValueError(f"ip_version must be one of {', '.join(IP_VERSIONS)}, got {ip_version!r}")
        self.ip_version = ip_version
        self._types = IP_VERSIONS[ip_version]
        # name -> the answers of its queries so far (two-family lookups): see _on_result
        self._parts: dict[str, list] = {}
        if max_in_flight < 1 or tries < 1 or timeout <= 0 or max_cache < 0:
            raise ValueError("max_in_flight, tries, timeout must be positive")
        self.max_in_flight = max_in_flight
        self.timeout = timeout
        self.tries = tries
        self.valid_time = valid_time
        self.min_ttl = min(min_ttl, valid_time)
        self.negative_ttl = negative_ttl
        self.timeout_ttl = timeout_ttl
        self.max_cache = max_cache
        self.clock = clock
        self.stats = ResolverStats()
        self._cache: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        self._waiters: dict[str, list[asyncio.Future]] = {}
        self._queue: collections.deque[str] = collections.deque()
        self._readers: set[int] = set()
        self._writers: set[int] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._pumping = False
        self._processing = False
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        csv = []
        for ip, port in servers:
            try:
                address = ipaddress.ip_address(ip)
            except ValueError:
                raise ValueError(f"DNS server must be an IP address: {ip!r}") from None
            if not 0 < int(port) < 65536:
                raise ValueError(f"bad DNS server port: {port!r}")
            csv.append(f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}")
        self._channel = _open_channel(self._sock_state, timeout, tries)
        self._channel.servers = csv
        # Bound method callbacks built once: these run per query / per event.
        self._on_result_cb = self._on_result

    # ------------------------------------------------------------ public API
    async def resolve(self, name: str) -> DNSAnswer:
        """Resolve ``name`` to its addresses (see ``ip_version``); failures come back as values."""
        cache = self._cache
        entry = cache.get(name)  # fast path: keys are normalized names, never literals
        if entry is not None:
            left = entry.expires - self.clock()
            if left > 0:
                cache.move_to_end(name)
                self.stats.cache_hits += 1
                return DNSAnswer(name, entry.ips, entry.error, left, True)
        literal = _literal_ip(name.strip())
        if literal is not None:
            self.stats.literals += 1
            return DNSAnswer(literal, (literal,), None, self.valid_time, False)
        norm = normalize_name(name)
        if norm is None:
            return DNSAnswer(name, (), NXDOMAIN, 0.0, False)
        entry = cache.get(norm)
        if entry is not None:
            left = entry.expires - self.clock()
            if left > 0:
                cache.move_to_end(norm)
                self.stats.cache_hits += 1
                return DNSAnswer(norm, entry.ips, entry.error, left, True)
            del cache[norm]
        if self._closed:
            return DNSAnswer(norm, (), REFUSED, 0.0, False)
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        future = self._loop.create_future()
        waiters = self._waiters.get(norm)
        if waiters is not None:
            waiters.append(future)
            self.stats.coalesced += 1
        else:
            self._waiters[norm] = [future]
            self._queue.append(norm)
            self.stats.queued += 1
            if not self._pumping:
                self._pump()
        return await future

    def cached(self, name: str) -> DNSAnswer | None:
        """The cached, unexpired answer for ``name`` if any (no query, no stats)."""
        norm = normalize_name(name)
        entry = self._cache.get(norm) if norm else None
        if entry is None:
            return None
        left = entry.expires - self.clock()
        if left <= 0:
            return None
        return DNSAnswer(norm, entry.ips, entry.error, left, True)

    @property
    def cache_size(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        """Stop: pending and queued resolves complete with ``"refused"``.

        Idempotent.  Later ``resolve()`` calls still answer from the cache and
        literals; anything else gets ``"refused"``.
        """
        if self._closed:
            return
        self._closed = True
        while self._queue:
            name = self._queue.popleft()
            self._finish(name, (), REFUSED, 0.0, cache=False)
        self.stats.queued = 0
        try:
            self._channel.cancel()  # in-flight callbacks fire now, on this thread
        except RuntimeError:
            pass
        self._unwatch_all()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._channel.close()

    async def __aenter__(self) -> "Resolver":
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ batching
    def _pump(self) -> None:
        """Move queued names into c-ares while slots are free."""
        self._pumping = True
        sent = False
        try:
            stats = self.stats
            types = self._types
            n = len(types)
            limit = max(self.max_in_flight, n)
            while self._queue and stats.in_flight + n <= limit and not self._closed:
                name = self._queue.popleft()
                stats.queued -= 1
                if n > 1:
                    self._parts[name] = []
                for qtype in types:
                    stats.in_flight += 1
                    stats.queries_sent += 1
                    if stats.in_flight > stats.peak_in_flight:
                        stats.peak_in_flight = stats.in_flight
                    try:
                        self._channel.query(name, qtype, callback=self._callback_for(name, qtype))
                        sent = True
                    except (pycares.AresError, RuntimeError, ValueError, UnicodeError) as exc:
                        if name not in self._waiters:
                            continue  # c-ares already reported the failure via the callback
                        status = exc.args[0] if isinstance(exc, pycares.AresError) and exc.args else None
                        self._on_result(name, qtype, None, status if status is not None else _E.ARES_EBADNAME)
        finally:
            self._pumping = False
        if sent and not self._processing:  # inside process_fd: armed after it
            self._arm_timer()

    def _callback_for(self, name: str, qtype: int = _TYPE_A):
        on_result = self._on_result_cb
        return lambda result, status: on_result(name, qtype, result, status)

    def _on_result(self, name: str, qtype: int, result, status) -> None:
        """c-ares callback: turn a reply (or its failure) into the outcome.

        With two families, the first reply is kept in ``_parts`` until the
        second one comes; then both make one answer.
        """
        self.stats.in_flight -= 1
        try:
            if status is None:
                ips, ttl = _addresses(name, result, qtype)
                outcome = (ips, ttl, None) if ips else ((), 0.0, BAD_ANSWER)
            else:
                outcome = ((), 0.0, _STATUS_TO_ERROR.get(status, BAD_ANSWER))
        except Exception:  # hostile data must never escape into c-ares
            outcome = ((), 0.0, BAD_ANSWER)
        parts = self._parts.get(name)
        if parts is not None:
            parts.append((qtype, outcome))
            if len(parts) < len(self._types):
                return
            del self._parts[name]
            outcome = _combine(parts)
        if name in self._waiters:
            ips, ttl, error = outcome
            if error is None:
                ttl = min(max(ttl, self.min_ttl), self.valid_time)
                self.stats.answers += 1
                self._finish(name, ips, None, ttl, cache=True)
            else:
                self._record_failure(name, error)
        if self._queue and not self._pumping:
            self._pump()

    def _record_failure(self, name: str, error: str) -> None:
        self.stats.failures[error] += 1
        if self._closed:
            self._finish(name, (), error, 0.0, cache=False)
        elif error == TIMEOUT:
            self._finish(name, (), error, self.timeout_ttl, cache=self.timeout_ttl > 0)
        else:
            self._finish(name, (), error, self.negative_ttl, cache=self.negative_ttl > 0)

    def _finish(self, name: str, ips: tuple[str, ...], error: str | None, ttl: float, *, cache: bool) -> None:
        if cache and self.max_cache:
            cache_map = self._cache
            cache_map[name] = _Entry(ips, error, self.clock() + ttl, ttl)
            cache_map.move_to_end(name)
            while len(cache_map) > self.max_cache:
                cache_map.popitem(last=False)
        answer = DNSAnswer(name, ips, error, ttl if cache else 0.0, False)
        for future in self._waiters.pop(name, ()):
            if not future.done():
                future.set_result(answer)

    # ------------------------------------------------------ loop integration
    def _sock_state(self, fd: int, readable: bool, writable: bool) -> None:
        """c-ares says which events it wants on ``fd`` (0, 0: forget it)."""
        if self._closed or self._loop is None:
            return  # e.g. pycares' destroyer thread closing sockets after close()
        loop = self._loop
        if readable:
            if fd not in self._readers:
                self._readers.add(fd)
                loop.add_reader(fd, self._on_readable, fd)
        elif fd in self._readers:
            self._readers.discard(fd)
            loop.remove_reader(fd)
        if writable:
            if fd not in self._writers:
                self._writers.add(fd)
                loop.add_writer(fd, self._on_writable, fd)
        elif fd in self._writers:
            self._writers.discard(fd)
            loop.remove_writer(fd)

    def _on_readable(self, fd: int) -> None:
        self._process(fd, _SOCKET_BAD)

    def _on_writable(self, fd: int) -> None:
        self._process(_SOCKET_BAD, fd)

    def _on_timer(self) -> None:
        self._timer = None
        if not self._closed:
            self._process(_SOCKET_BAD, _SOCKET_BAD)

    def _process(self, read_fd: int, write_fd: int) -> None:
        """Let c-ares handle I/O and timeouts, then re-arm the timer once."""
        if self._closed:
            return
        self._processing = True
        try:
            self._channel.process_fd(read_fd, write_fd)
        finally:
            self._processing = False
        self._arm_timer()

    def _arm_timer(self) -> None:
        """Keep the one timer at (or before) c-ares' next timeout."""
        if self._closed or self._loop is None:
            return
        if self.stats.in_flight == 0:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            return
        delay = self._channel.timeout(self.timeout * 2)
        when = self._loop.time() + delay
        if self._timer is not None:
            if self._timer_at <= when + 0.001:
                return
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._on_timer)

    def _unwatch_all(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            for fd in self._readers:
                loop.remove_reader(fd)
            for fd in self._writers:
                loop.remove_writer(fd)
        self._readers.clear()
        self._writers.clear()


def _combine(parts) -> tuple[tuple[str, ...], float, str | None]:
    """One answer of a two-family lookup: ``parts`` are ``(qtype, (ips, ttl, error))``.

    The addresses interleave, IPv6 first (RFC 8305 section 4); the TTL is the
    smallest of the families that answered; with no address at all, the
    more telling error (:data:`_ERROR_RANK`).
    """
    by_type = dict(parts)
    v6, v4 = by_type.get(_TYPE_AAAA, ((), 0.0, NXDOMAIN)), by_type.get(_TYPE_A, ((), 0.0, NXDOMAIN))
    if not v6[0] and not v4[0]:
        error = min((v6[2], v4[2]), key=lambda e: _ERROR_RANK.get(e, 5))
        return (), 0.0, error
    ips: list[str] = []
    for i in range(max(len(v6[0]), len(v4[0]))):
        ips.extend(family[0][i] for family in (v6, v4) if i < len(family[0]))
    ttl = min(t for found, t, _ in (v6, v4) if found)
    return tuple(ips), ttl, None


def _addresses(qname: str, result, qtype: int = _TYPE_A) -> tuple[tuple[str, ...], float]:
    """The A (or AAAA: ``qtype``) addresses for ``qname`` in a pycares DNSResult, and their TTL.

    Follows the CNAME chain starting at ``qname`` (case-insensitive, bounded);
    only records of ``qtype`` owned by the chain's last name count.  The TTL
    is the smallest TTL of the records used.  Returns ``((), 0)`` when none
    match.
    """
    cnames: dict[str, tuple[str, int]] = {}
    a_records: dict[str, list[tuple[str, int]]] = {}
    for record in result.answer:
        owner = record.name.rstrip(".").lower()
        if record.type == qtype:
            a_records.setdefault(owner, []).append((record.data.addr, record.ttl))
        elif record.type == _TYPE_CNAME:
            cnames[owner] = (record.data.cname.rstrip(".").lower(), record.ttl)
    current = qname
    ttl = float("inf")
    for _hop in range(_MAX_CNAME_HOPS):
        found = a_records.get(current)
        if found:
            ips = tuple(dict.fromkeys(addr for addr, _ in found))
            ttl = min(ttl, min(t for _, t in found))
            return ips, float(ttl)
        if current not in cnames:
            break
        current, link_ttl = cnames[current]
        ttl = min(ttl, link_ttl)
    return (), 0.0
