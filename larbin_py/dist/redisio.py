"""The Redis side of the distributed crawl: one client, one pipeline per tick.

:class:`RedisIO` connects (redis.asyncio, hiredis when installed), loads the
function library ``larbin.lua`` once per connection (``FUNCTION LOAD
REPLACE``) and counts round trips: one :meth:`Tick.execute` is one, whatever
it carries (DISTRIBUTED.md §5: a worker's traffic is one pipeline per tick).

A :class:`Tick` collects operations; each method returns the index of its
result in the list :meth:`Tick.execute` answers::

    t = io.tick()
    i = t.enqueue(p, [(fingerprint, record), ...])
    j = t.ack(q, worker, token, [(entry_id, "fetched"), ...])
    results = await t.execute()          # results[i]: how many were new

Operations on a partition's state (read, claim, ack, release, the robots and
site-wait writes) are fenced: their result is :data:`FENCED` when the
caller's ``(worker, token)`` no longer holds ``own:{p}``; nothing was
changed then.  Redis runs the pipeline's commands in order, so an enqueue
put before an ack in one tick is applied before it (a page is acked only
after its links are safe).

Errors: Redis unreachable raises :class:`RedisUnavailable` (its message names
the URL); a crawl that exists when a fresh start is asked raises
:class:`CrawlExists` (naming crawlName); a joiner whose settings differ
raises :class:`CrawlMismatch` naming the keys.  All three derive from
:class:`DistError`, which the command line turns into exit 2.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable, Iterable, NamedTuple, Sequence

from .keys import Keys, bucket_of, signed64

__all__ = [
    "RedisIO", "Tick", "FENCED", "DELIVERY_LIMIT", "DistError", "RedisUnavailable", "CrawlExists",
    "CrawlMismatch", "CrawlMeta", "Entry", "Heartbeat", "IpGrant", "Totals", "View", "PartitionRow",
    "rules_digest", "library_code",
]

#: An entry delivered more times than this is forgotten as ``workerCrash``
#: (a poison pill: the URL made its workers die).
DELIVERY_LIMIT = 3

#: How long ``iplast:{X}`` outlives a release (the pace of a slow server).
IPLAST_KEEP_MS = 3_600_000


class _Fenced:
    """The result of a fenced operation refused: the caller's lease is gone."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FENCED"

    def __bool__(self) -> bool:
        return False


FENCED = _Fenced()


class DistError(Exception):
    """A distributed-mode failure the command line reports in one line (exit 2)."""


class RedisUnavailable(DistError):
    """Redis cannot be reached (the message names the URL)."""


class CrawlExists(DistError):
    """A fresh start found the crawl already in Redis."""


class CrawlMismatch(DistError):
    """The crawl in Redis was created with other settings (the message names them)."""


def library_code() -> str:
    """The source of the Redis function library (larbin.lua)."""
    return resources.files(__package__).joinpath("larbin.lua").read_text(encoding="utf-8")


def rules_digest(rules: dict[str, str]) -> str:
    """A short digest of the settings every worker must share."""
    blob = json.dumps(rules, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.blake2b(blob, digest_size=12).hexdigest()


@dataclass(frozen=True)
class CrawlMeta:
    """What a crawl is created with and every joiner must agree on."""

    partitions: int
    seen_buckets: int
    rules: dict[str, str] = field(default_factory=dict)  # config key -> value as written

    def fields(self) -> list[str]:
        return ["partitions", str(self.partitions), "seenBuckets", str(self.seen_buckets),
                "rules", rules_digest(self.rules), "rulesJson", json.dumps(self.rules, sort_keys=True)]

    @classmethod
    def from_hash(cls, h: dict[str, str]) -> "CrawlMeta":
        return cls(int(h["partitions"]), int(h["seenBuckets"]), json.loads(h.get("rulesJson") or "{}"))

    def differences(self, other: "CrawlMeta") -> list[str]:
        """The keys whose values differ, each as ``key (crawl: a, here: b)``."""
        out = []
        if self.partitions != other.partitions:
            out.append(f"partitions (crawl: {other.partitions}, here: {self.partitions})")
        if self.seen_buckets != other.seen_buckets:
            out.append(f"seenBuckets (crawl: {other.seen_buckets}, here: {self.seen_buckets})")
        for key in sorted(set(self.rules) | set(other.rules)):
            mine, theirs = self.rules.get(key), other.rules.get(key)
            if mine != theirs:
                out.append(f"{key} (crawl: {theirs!r}, here: {mine!r})")
        return out


class Entry(NamedTuple):
    """One stream entry handed to the partition's owner."""

    id: str
    record: bytes
    deliveries: int = 1


class Claimed(NamedTuple):
    """A takeover's pending entries: ``entries`` to crawl, ``poison`` to forget as workerCrash."""

    entries: list[Entry]
    poison: list[Entry]


class Heartbeat(NamedTuple):
    """What a heartbeat learned: the live members and the held partitions lost."""

    members: frozenset[str]
    lost: list[int]
    redis_ms: int = 0
    duplicate: bool = False  # another process holds this worker id


class IpGrant(NamedTuple):
    """The answer to an IP lease request."""

    granted: bool
    last_start_ms: int | None  # the previous holder's last request start (wall ms)
    pace: bytes | None  # the previous holder's ServerPace, as it wrote it
    retry_in_ms: int  # denied: the holder's lease ends in this many ms
    wanted: bool  # another worker waits for this IP
    clean: bool  # False: the previous lease expired unreleased (wait a full delay)


@dataclass
class Totals:
    """Global sums over the partitions (one atomic view)."""

    accepted: int = 0
    fetched: int = 0
    forgotten: dict[str, int] = field(default_factory=dict)
    queued: int = 0  # entries in the streams (not acked), pending ones included
    pending: int = 0  # delivered to a worker, not acked

    @property
    def done(self) -> int:
        return self.fetched + sum(self.forgotten.values())

    @property
    def balanced(self) -> bool:
        """Conservation: accepted = fetched + forgotten + queued."""
        return self.accepted == self.done + self.queued

    def key(self) -> tuple:
        return (self.accepted, self.fetched, tuple(sorted(self.forgotten.items())), self.queued, self.pending)


class PartitionRow(NamedTuple):
    partition: int
    accepted: int
    fetched: int
    forgotten: int
    queued: int
    pending: int
    owner: str  # "" when no lease
    acquisitions: int  # fence counter: how many times the lease was taken


@dataclass
class View:
    """``lb_view``: totals, optional per-partition rows, members and idle reports."""

    totals: Totals
    rows: list[PartitionRow]
    members: frozenset[str]
    reports: dict[str, tuple[int, bool]]  # worker -> (sequence, idle)
    redis_ms: int


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _hash(r: list) -> dict[str, Any]:
    """An HGETALL reply (field, value, ...) as ``{field: value}``."""
    return {_s(r[i]): r[i + 1] for i in range(0, len(r), 2)}


def _is_fenced(res: Any) -> bool:
    return res == b"FENCED" or res == "FENCED"


class Tick:
    """Operations collected for one pipeline (one round trip)."""

    def __init__(self, io: "RedisIO") -> None:
        self.io = io
        self.keys = io.keys
        self._cmds: list[tuple] = []  # kept to send the tick again (see execute)
        self._parsers: list[Callable[[Any], Any]] = []

    def __len__(self) -> int:
        return len(self._parsers)

    def _add(self, parser: Callable[[Any], Any]) -> int:
        self._parsers.append(parser)
        return len(self._parsers) - 1

    def _fcall(self, name: str, keys: Sequence[str], args: Sequence[Any], parser: Callable[[Any], Any]) -> int:
        self._cmds.append(("FCALL", name, len(keys), *keys, *args))
        return self._add(parser)

    # --- the crawl ------------------------------------------------------
    def meta(self, meta: CrawlMeta | None = None) -> int:
        """Create the crawl with ``meta`` when absent (``None``: only read).

        Result: ``("created", None)``, ``("absent", None)`` or ``("exists", CrawlMeta)``.
        """
        args = ["create", *meta.fields()] if meta is not None else ["read"]

        def parse(r):
            status = _s(r[0])
            if status != "exists":
                return status, None
            flat = [_s(x) for x in r[1:]]
            return status, CrawlMeta.from_hash(dict(zip(flat[::2], flat[1::2])))
        return self._fcall("lb_meta", [self.keys.meta], args, parse)

    # --- URLs -----------------------------------------------------------
    def enqueue(self, p: int, items: Iterable[tuple[int, bytes]]) -> int:
        """Test-and-enqueue ``(fingerprint, record)`` items of partition ``p``.

        Atomic (one function): each fingerprint new to the partition's seen
        set is added to it and its record appended to ``q:{p}``; result: how
        many were new.  An item already seen is never queued twice, and a
        new one is never answered "seen" (the set is exact).
        """
        buckets = self.io.seen_buckets
        bucket_index: dict[int, int] = {}
        keys = [self.keys.queue(p), self.keys.counts(p)]
        args: list[Any] = []
        for fp, record in items:
            b = bucket_of(fp, buckets)
            ki = bucket_index.get(b)
            if ki is None:
                keys.append(self.keys.seen(p, b))
                ki = bucket_index[b] = len(keys)
            args.extend((ki, signed64(fp), record))
        if not args:
            return self._add_const(0)
        return self._fcall("lb_enqueue", keys, args, int)

    def _add_const(self, value: Any) -> int:
        # an operation with nothing to send still has its slot in the results
        self._cmds.append(("PING",))
        return self._add(lambda _r: value)

    def read(self, p: int, worker: str, token: int, count: int) -> int:
        """New entries of ``q:{p}`` for its owner: ``list[Entry]`` or FENCED."""
        def parse(r):
            if _is_fenced(r):
                return FENCED
            return [Entry(_s(r[i]), r[i + 1]) for i in range(0, len(r), 2)]
        return self._fcall("lb_read", [self.keys.own(p), self.keys.queue(p)],
                           [f"{worker}:{token}", worker, count], parse)

    def claim(self, p: int, worker: str, token: int) -> int:
        """Every pending entry of ``q:{p}`` (a takeover): :class:`Claimed` or FENCED.

        Call it right after :meth:`acquire`: it re-delivers the caller's own
        pending entries too.  Entries delivered more than
        :data:`DELIVERY_LIMIT` times come back in ``poison``: ack them with
        the outcome ``workerCrash``.
        """
        def parse(r):
            if _is_fenced(r):
                return FENCED
            entries, poison = [], []
            for i in range(0, len(r), 3):
                e = Entry(_s(r[i]), r[i + 1], int(r[i + 2]))
                (poison if e.deliveries > DELIVERY_LIMIT else entries).append(e)
            return Claimed(entries, poison)
        return self._fcall("lb_claim", [self.keys.own(p), self.keys.queue(p)], [f"{worker}:{token}", worker], parse)

    def ack(self, p: int, worker: str, token: int, done: Iterable[tuple[str, str]]) -> int:
        """XACK + XDEL ``(entry_id, outcome)`` pairs and count each outcome.

        ``outcome`` is ``"fetched"`` or a forget reason (counted as
        ``forgotten:<reason>``).  Result: how many were acked (an entry acked
        before counts nothing), or FENCED.
        """
        args: list[Any] = [f"{worker}:{token}"]
        for entry_id, outcome in done:
            args.extend((entry_id, outcome))
        return self._fcall("lb_ack", [self.keys.own(p), self.keys.queue(p), self.keys.counts(p)], args,
                           lambda r: FENCED if _is_fenced(r) else int(r))

    # --- leases ---------------------------------------------------------
    def acquire(self, p: int, worker: str, ttl: float) -> int:
        """The lease of partition ``p``: the fencing token, or None when another worker holds it."""
        return self._fcall("lb_acquire", [self.keys.own(p), self.keys.fence(p), self.keys.queue(p)],
                           [worker, _ms(ttl)], lambda r: None if r is None else int(r))

    def release(self, p: int, worker: str, token: int) -> int:
        """The fenced release of a lease: True, or FENCED."""
        return self._fcall("lb_release", [self.keys.own(p)], [f"{worker}:{token}"],
                           lambda r: FENCED if _is_fenced(r) else True)

    def join(self, worker: str, instance: str, ttl: float) -> int:
        """Register a worker: True, or the instance id of the live process holding ``worker``."""
        return self._fcall("lb_join", [self.keys.members, self.keys.member(worker)], [worker, instance, _ms(ttl)],
                           lambda r: True if r == 1 else _s(r))

    def heartbeat(self, worker: str, ttl: float, held: dict[int, int], instance: str | None = None) -> int:
        """Renew the member key and the held leases ``{partition: token}``: a :class:`Heartbeat`."""
        parts = list(held)
        keys = [self.keys.members, self.keys.member(worker), *(self.keys.own(p) for p in parts)]
        args = [worker, instance or worker, _ms(ttl), *(held[p] for p in parts)]

        def parse(r):
            members = frozenset(_s(m) for m in r[0])
            lost = [parts[int(i) - 1] for i in r[1]]
            return Heartbeat(members, lost, int(r[2]), bool(int(r[3])))
        return self._fcall("lb_heartbeat", keys, args, parse)

    def leave(self, worker: str, instance: str | None = None) -> int:
        return self._fcall("lb_leave", [self.keys.members, self.keys.member(worker), self.keys.idle],
                           [worker, instance or worker], lambda r: True)

    # --- IP leases ------------------------------------------------------
    def ip_acquire(self, ip: str, holder: str, ttl: float) -> int:
        """Take or renew the lease of ``ip``: an :class:`IpGrant`.

        ``holder`` identifies the process (worker id plus an instance id, so
        a respawned worker does not mistake its dead predecessor's lease for
        its own).
        """
        def parse(r):
            last = _s(r[1])
            pace = r[2] if r[2] not in (b"", "") else None
            return IpGrant(bool(int(r[0])), int(last) if last else None, pace, int(r[3]) if int(r[3]) > 0 else 0,
                           bool(int(r[4])), bool(int(r[5])))
        keys = self.keys
        return self._fcall("lb_ip_acquire", [keys.ip(ip), keys.iplast(ip), keys.ipwant(ip)], [holder, _ms(ttl)], parse)

    def ip_release(self, ip: str, holder: str, last_start_ms: int, pace: bytes | str = b"") -> int:
        """Let go of ``ip``, leaving the last request start and the server pace: True, or False when not ours."""
        keys = self.keys
        return self._fcall("lb_ip_release", [keys.ip(ip), keys.iplast(ip)],
                           [holder, int(last_start_ms), pace, IPLAST_KEEP_MS], lambda r: bool(int(r)))

    # --- partition side data ---------------------------------------------
    def put_robots(self, p: int, worker: str, token: int, answers: dict[str, bytes | str]) -> int:
        """Fenced: store robots.txt answers (host -> serialized answer). True or FENCED."""
        return self._put(self.keys.robots(p), p, worker, token, answers, replace=False)

    def put_sitewait(self, p: int, worker: str, token: int, waits: dict[str, bytes | str | float]) -> int:
        """Fenced: replace the partition's site waits (host -> next allowed). True or FENCED."""
        return self._put(self.keys.sitewait(p), p, worker, token, waits, replace=True)

    def _put(self, key: str, p: int, worker: str, token: int, mapping: dict, replace: bool) -> int:
        args: list[Any] = [f"{worker}:{token}", "1" if replace else "0"]
        for k, v in mapping.items():
            args.extend((k, v))
        return self._fcall("lb_put", [self.keys.own(p), key], args, lambda r: FENCED if _is_fenced(r) else True)

    def get_robots(self, p: int) -> int:
        """The partition's robots.txt answers: ``{host: bytes}`` (read at takeover)."""
        self._cmds.append(("HGETALL", self.keys.robots(p)))
        return self._add(_hash)

    def get_sitewait(self, p: int) -> int:
        """The partition's site waits: ``{host: bytes}`` (read at takeover)."""
        self._cmds.append(("HGETALL", self.keys.sitewait(p)))
        return self._add(_hash)

    # --- stats, output position, termination ------------------------------
    def put_stats(self, worker: str, snapshot: dict | str | bytes, ttl: float = 3.0) -> int:
        blob = snapshot if isinstance(snapshot, (str, bytes)) else json.dumps(snapshot, separators=(",", ":"))
        self._cmds.append(("SET", self.keys.stats(worker), blob, "PX", _ms(ttl)))
        return self._add(lambda r: True)

    def get_stats(self, workers: Sequence[str]) -> int:
        """``{worker: snapshot dict}`` for the workers whose snapshot is live."""
        names = list(workers)
        if not names:
            return self._add_const({})
        self._cmds.append(("MGET", *(self.keys.stats(w) for w in names)))

        def parse(r):
            out = {}
            for w, blob in zip(names, r):
                if blob is not None:
                    try:
                        out[w] = json.loads(blob)
                    except ValueError:
                        continue
            return out
        return self._add(parse)

    def put_outpos(self, worker: str, position: str) -> int:
        self._cmds.append(("SET", self.keys.outpos(worker), position))
        return self._add(lambda r: True)

    def get_outpos(self, worker: str) -> int:
        self._cmds.append(("GET", self.keys.outpos(worker)))
        return self._add(lambda r: None if r is None else _s(r))

    def report(self, worker: str, seq: int, idle: bool) -> int:
        """This worker's idle report for the termination waves (sequence, idle)."""
        self._cmds.append(("HSET", self.keys.idle, worker, f"{int(seq)}:{1 if idle else 0}"))
        return self._add(lambda r: True)

    def view(self, partitions: int | None = None, rows: bool = False) -> int:
        """One atomic :class:`View` of the counters (``rows``: per partition too)."""
        n = self.io.partitions if partitions is None else partitions
        keys = [self.keys.members, self.keys.idle]
        for p in range(n):
            keys.extend((self.keys.counts(p), self.keys.queue(p), self.keys.own(p), self.keys.fence(p)))

        def parse(r):
            flat = [_s(x) if i % 2 == 0 else int(x) for i, x in enumerate(r[0])]
            d = dict(zip(flat[::2], flat[1::2]))
            totals = Totals(d.pop("accepted", 0), d.pop("fetched", 0), {}, d.pop("queued", 0), d.pop("pending", 0))
            totals.forgotten = {k[len("forgotten:"):]: v for k, v in d.items() if k.startswith("forgotten:")}
            rr = r[1]
            prow = [PartitionRow(i // 7, int(rr[i]), int(rr[i + 1]), int(rr[i + 2]), int(rr[i + 3]),
                                 int(rr[i + 4]), _s(rr[i + 5]).rsplit(":", 1)[0], int(rr[i + 6]))
                    for i in range(0, len(rr), 7)]
            rep = [_s(x) for x in r[3]]
            reports = {}
            for w, v in zip(rep[::2], rep[1::2]):
                seq, _, idle = v.partition(":")
                reports[w] = (int(seq), idle == "1")
            return View(totals, prow, frozenset(_s(m) for m in r[2]), reports, int(r[4]))
        return self._fcall("lb_view", keys, ["1" if rows else "0"], parse)

    # --- running ----------------------------------------------------------
    async def execute(self) -> list[Any]:
        """Send the tick (one round trip) and answer each operation's result, in order."""
        if not self._parsers:
            return []
        raw = await self._send()
        if any(isinstance(r, Exception) and "Function not found" in str(r) for r in raw):
            # A Redis restarted without its data (or flushed) lost the library:
            # every FCALL of the tick failed and only plain, idempotent
            # commands ran, so the tick is sent again once the library is back.
            await self.io.load_library()
            raw = await self._send()
        out = []
        for parser, r in zip(self._parsers, raw):
            if isinstance(r, Exception):
                raise r
            out.append(parser(r))
        return out

    async def _send(self) -> list[Any]:
        try:
            return await self.io.pipe.execute(self._cmds)
        except _CONNECTION_ERRORS as exc:
            raise RedisUnavailable(f"Redis at {self.io.url_shown} unreachable: {exc}") from exc
        finally:
            self.io.round_trips += 1


def _ms(seconds: float) -> int:
    return max(1, int(round(seconds * 1000)))


try:  # redis-py's connection errors
    import redis.exceptions as _rex

    _CONNECTION_ERRORS: tuple[type[BaseException], ...] = (_rex.ConnectionError, _rex.TimeoutError, OSError)
except ImportError:  # pragma: no cover - redis is a dependency
    _CONNECTION_ERRORS = (OSError,)


class RedisIO:
    """One worker's (or the launcher's) connection to the crawl's Redis."""

    def __init__(self, url: str, crawl: str = "larbin", *, partitions: int = 256, seen_buckets: int = 128,
                 timeout: float = 5.0) -> None:
        self.url = url
        self.keys = Keys(crawl)
        self.crawl = crawl
        self.partitions = partitions
        self.seen_buckets = seen_buckets
        self.timeout = timeout
        self.round_trips = 0
        self.instance = secrets.token_hex(6)  # this process, for member and IP lease values
        self.client = None
        self.pipe = None  # the ticks' connection (larbin_py.dist.resp)
        self._blocking = None  # the second connection (XREAD BLOCK)

    @property
    def url_shown(self) -> str:
        """The URL without a password, for messages."""
        from ..redact import redact_url

        return redact_url(self.url)

    def _make_client(self, timeout: float | None):
        import redis.asyncio as aredis

        return aredis.from_url(self.url, socket_timeout=timeout, socket_connect_timeout=self.timeout,
                               health_check_interval=0)

    async def connect(self) -> "RedisIO":
        """Connect, check the server, load the function library (one round trip each)."""
        if not self.url.startswith(("redis://", "rediss://", "unix://")):
            raise RedisUnavailable(f"redisUrl {self.url!r}: expected redis://host:port/db or unix:///path")
        from .resp import Pipe

        self.client = self._make_client(self.timeout)
        self.pipe = Pipe(self.url, self.timeout)
        try:
            info = await self.client.info("server")
            self.round_trips += 1
            version = tuple(int(x) for x in str(info.get("redis_version", "0")).split(".")[:2])
            if version < (7, 0):
                raise RedisUnavailable(f"Redis at {self.url_shown} is version {info.get('redis_version')}: "
                                       "the distributed mode needs Redis 7.0 or later (Functions)")
            await self.load_library()
        except _CONNECTION_ERRORS as exc:
            await self.close()
            raise RedisUnavailable(f"cannot reach Redis at {self.url_shown}: {exc}") from exc
        return self

    async def load_library(self) -> None:
        """``FUNCTION LOAD REPLACE`` of larbin.lua (one round trip)."""
        self.round_trips += 1
        await self.client.execute_command("FUNCTION", "LOAD", "REPLACE", library_code())

    async def close(self) -> None:
        for c in (self.client, self._blocking):
            if c is not None:
                try:
                    await c.aclose()
                except Exception:  # closing a broken connection
                    pass
        if self.pipe is not None:
            self.pipe.close()
        self.client = self._blocking = self.pipe = None

    async def __aenter__(self) -> "RedisIO":
        return await self.connect()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def tick(self) -> Tick:
        return Tick(self)

    async def _one(self, build: Callable[[Tick], int]) -> Any:
        t = self.tick()
        build(t)
        return (await t.execute())[0]

    # --- the crawl's meta -------------------------------------------------
    async def create_crawl(self, meta: CrawlMeta, *, reload: bool = False) -> CrawlMeta:
        """A fresh start (``reload`` False) creates the crawl and refuses one that exists;
        with ``reload`` the crawl must exist with the same settings."""
        status, stored = await self._one(lambda t: t.meta(meta if not reload else None))
        if status == "created":
            return self._adopt(meta)
        if status == "absent":  # reload of nothing: start it
            status, stored = await self._one(lambda t: t.meta(meta))
            if status == "created":
                return self._adopt(meta)
        if not reload:
            raise CrawlExists(f"a crawl named {self.crawl!r} already exists in Redis at {self.url_shown}: "
                              "start with --reload to continue it, or choose another crawlName")
        return self._check(meta, stored)

    async def join_crawl(self, meta: CrawlMeta) -> CrawlMeta:
        """A worker joining: create the crawl when absent, else check the settings agree."""
        status, stored = await self._one(lambda t: t.meta(meta))
        if status == "created":
            return self._adopt(meta)
        return self._check(meta, stored)

    async def read_crawl(self) -> CrawlMeta | None:
        status, stored = await self._one(lambda t: t.meta(None))
        if stored is not None:
            self._adopt(stored)
        return stored

    def _check(self, meta: CrawlMeta, stored: CrawlMeta) -> CrawlMeta:
        diff = meta.differences(stored)
        if diff:
            raise CrawlMismatch(f"crawl {self.crawl!r} in Redis at {self.url_shown} was created with other "
                                "settings: " + "; ".join(diff))
        return self._adopt(stored)

    def _adopt(self, meta: CrawlMeta) -> CrawlMeta:
        self.partitions, self.seen_buckets = meta.partitions, meta.seen_buckets
        return meta

    async def drop_crawl(self) -> int:
        """Delete every key of the crawl (a fresh start over an old crawl, the tests)."""
        n = 0
        async for key in self.client.scan_iter(match=self.keys.pattern(), count=1000):
            n += await self.client.unlink(key)
        self.round_trips += 1
        return n

    # --- one-operation shortcuts (each one round trip) ---------------------
    async def enqueue(self, p: int, items) -> int:
        return await self._one(lambda t: t.enqueue(p, items))

    async def acquire(self, p: int, worker: str, ttl: float) -> int | None:
        return await self._one(lambda t: t.acquire(p, worker, ttl))

    async def release(self, p: int, worker: str, token: int):
        return await self._one(lambda t: t.release(p, worker, token))

    async def read(self, p: int, worker: str, token: int, count: int):
        return await self._one(lambda t: t.read(p, worker, token, count))

    async def claim(self, p: int, worker: str, token: int):
        return await self._one(lambda t: t.claim(p, worker, token))

    async def ack(self, p: int, worker: str, token: int, done):
        return await self._one(lambda t: t.ack(p, worker, token, done))

    async def heartbeat(self, worker: str, ttl: float, held: dict[int, int], instance: str | None = None) -> Heartbeat:
        return await self._one(lambda t: t.heartbeat(worker, ttl, held, instance))

    async def ip_acquire(self, ip: str, holder: str, ttl: float) -> IpGrant:
        return await self._one(lambda t: t.ip_acquire(ip, holder, ttl))

    async def ip_release(self, ip: str, holder: str, last_start_ms: int, pace: bytes | str = b"") -> bool:
        return await self._one(lambda t: t.ip_release(ip, holder, last_start_ms, pace))

    async def view(self, rows: bool = False) -> View:
        return await self._one(lambda t: t.view(rows=rows))

    # --- waiting for new entries (second connection) ------------------------
    async def wait_new(self, streams: dict[int, str], timeout: float) -> list[int]:
        """Block until one of the partitions' streams has an entry after the given id
        (``"$"``: after now), or ``timeout`` s pass: the partitions that woke.

        A plain XREAD BLOCK on a second connection: it only tells the worker
        to send a fenced read in its next tick (one round trip per wake-up).
        """
        if not streams:
            return []
        if self._blocking is None:
            self._blocking = self._make_client(None)
        parts = list(streams)
        try:
            r = await self._blocking.xread({self.keys.queue(p): streams[p] for p in parts}, count=1,
                                           block=max(1, int(timeout * 1000)))
        except _CONNECTION_ERRORS as exc:
            raise RedisUnavailable(f"Redis at {self.url_shown} unreachable: {exc}") from exc
        finally:
            self.round_trips += 1
        woke = {_s(k) for k, _ in (r or [])}
        return [p for p in parts if self.keys.queue(p) in woke]

    async def info(self, section: str | None = None) -> dict:
        """``INFO`` (used_memory, total_reads_processed, ...): one round trip."""
        self.round_trips += 1
        return await self.client.info(section) if section else await self.client.info()
