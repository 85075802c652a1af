"""The Redis side of the distributed crawl: one client, one pipeline per tick.

:class:`RedisIO` connects (redis.asyncio, hiredis when installed), loads the
function library ``larbin.lua`` once per connection (``FUNCTION LOAD
REPLACE``) and counts round trips: one :meth:`Tick.execute` is one, whatever
it carries (docs/distributed-design.md, "Queued URLs": a worker's traffic is one pipeline per tick).

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

A tick runs as one transaction (``MULTI`` ... ``EXEC``): a command that
Redis refuses when it is queued (``-OOM``, ``-READONLY``, ``-LOADING``,
``-BUSY``, ``-MISCONF``, ``-NOAUTH``...) discards the whole tick, so a page
is never acked while the links it produced were refused.  The ``MULTI`` is
sent at the end of the *previous* tick and its answer read there (``cmds,
EXEC, MULTI``; after a new connection, a round trip of its own): a
``MULTI`` refused while Redis loads or runs a long script would otherwise
let the tick's commands run one by one once it is done, the ack without
the enqueue before it.  A tick that fails in any way closes the
connection, which discards whatever transaction the server still holds.

Errors:

=================================  ==========================================
what happens                       what is raised
=================================  ==========================================
Redis unreachable, the connection  :class:`RedisUnavailable` (the URL named,
lost or a tick not answered in     password hidden); the tick's effects are
``timeout``                        unknown: resend what is idempotent
Redis answers an error reply       :class:`RedisRefused` (``kind``: the
(to the tick or to ``FUNCTION      reply's first word, ``OOM``, ``LOADING``,
LOAD``, ``INFO``)                  ``READONLY``...): a refused tick changed
                                   nothing; an error met inside ``EXEC``
                                   may have let other commands of the tick
                                   run: resend what is idempotent
the function library is missing    loaded again (``FUNCTION LOAD``), the
(a restart without its data, a     tick sent once more
``FUNCTION FLUSH``)
fewer than ``redisReplicas``       :class:`RedisReplicasBehind`: the tick
replicas acknowledged the tick     was done on the master but does not
within :data:`REPLICA_WAIT_MS`     count: resend what is idempotent
(``WAIT``)
a ``redis+sentinel://`` URL: the   the next tick asks the sentinels for the
tick unreachable, or answered      master first (:meth:`RedisIO.follow_failover`,
``-READONLY`` / ``-MASTERDOWN``    new connections, the library loaded);
                                   :class:`RedisUnavailable` while none
                                   names a master that answers
a fresh start finds the crawl      :class:`CrawlExists` (naming crawlName)
a joiner's settings differ         :class:`CrawlMismatch` (naming the keys)
=================================  ==========================================

:class:`RedisUnavailable` and :class:`RedisRefused` are :class:`RedisFailed`:
a failure that passes (the coordinator pauses and retries).  All derive
from :class:`DistError`, which the command line turns into exit 2 when it
happens at start.
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
    "RedisIO", "Tick", "FENCED", "CRASH_LIMIT", "DistError", "RedisFailed", "RedisUnavailable",
    "RedisRefused", "RedisReplicasBehind", "CrawlExists", "Claimed",
    "CrawlMismatch", "CrawlMeta", "Entry", "Heartbeat", "IpGrant", "Totals", "View", "PartitionRow",
    "rules_digest", "library_code",
]

#: An entry whose request was running when a worker died this many times is
#: forgotten as ``workerCrash`` (a poison pill: the URL kills its workers).
#: Deliveries are not tries: an entry read ahead and claimed again by a
#: takeover never counts (larbin_py.distributed.inflight).
CRASH_LIMIT = 3

#: How long ``iplast:{X}`` outlives a release (the pace of a slow server).
IPLAST_KEEP_MS = 3_600_000

#: How long a tick waits for its replicas (``WAIT N ms``; never 0, which waits for ever).
REPLICA_WAIT_MS = 1000

#: Error replies after which a sentinel URL's master is looked for again (it was demoted).
FAILOVER_KINDS = frozenset({"READONLY", "MASTERDOWN"})


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


class RedisFailed(DistError):
    """Redis failed a call in a way that passes: unreachable, or an error reply (pause, retry)."""

    #: What failed, in one word: ``connection``, or the error reply's first word (``OOM``...).
    kind = "error"


class RedisUnavailable(RedisFailed):
    """Redis cannot be reached, or did not answer in time (the message names the URL)."""

    kind = "connection"


class RedisReplicasBehind(RedisFailed):
    """A tick was done by the master but not acknowledged by ``redisReplicas`` replicas
    in time (``WAIT``): it does not count, and is sent again."""

    kind = "WAIT"


class RedisRefused(RedisFailed):
    """Redis answered an error reply (the message names the URL and the reply)."""

    def __init__(self, url_shown: str, reply: BaseException, what: str = "a tick") -> None:
        text = str(reply).strip() or type(reply).__name__
        self.reply = text
        self.kind = text.split(None, 1)[0] if text.split() else "error"
        if not self.kind.isupper():
            self.kind = "ERR"
        super().__init__(f"Redis at {url_shown} refused {what}: {text}")


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
    crashes: int = 0  # workers that died while fetching it (claims only)


class Claimed(NamedTuple):
    """A takeover's pending entries: ``entries`` to crawl, ``poison`` (:data:`CRASH_LIMIT`
    crashes) to forget as workerCrash."""

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
    #: A recrawl's verdicts (larbin_py.recrawl.VERDICTS), counted with the acks.
    recrawl: dict[str, int] = field(default_factory=dict)

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


def _missing_function(r: Any) -> bool:
    return isinstance(r, Exception) and "Function not found" in str(r)


def unwrap_transaction(queued: list[Any], done: Any) -> list[Any]:
    """The results of a transaction's commands from their replies when queued and ``EXEC``'s.

    A discarded transaction (``EXECABORT``: a command refused when queued,
    or ``EXEC`` itself refused) gives every command the error it got when
    queued, or ``EXEC``'s.
    """
    if isinstance(done, Exception):
        first = next((r for r in queued if isinstance(r, Exception)), done)
        return [r if isinstance(r, Exception) else first for r in queued]
    if done is None or len(done) != len(queued):  # (a WATCH we never send)
        raise ValueError(f"a transaction of {len(queued)} commands executed "
                         f"{0 if done is None else len(done)}")
    return list(done)


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
        keys = [self.keys.queue(p), self.keys.counts(p), self.keys.open]
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
        pending entries too.  Entries whose request was running when a worker
        died :data:`CRASH_LIMIT` times (:meth:`crashed`) come back in
        ``poison``: ack them with the outcome ``workerCrash``.  A claim never
        counts as a try.
        """
        def parse(r):
            if _is_fenced(r):
                return FENCED
            entries, poison = [], []
            for i in range(0, len(r), 3):
                e = Entry(_s(r[i]), r[i + 1], int(r[i + 2]))
                (poison if e.crashes >= CRASH_LIMIT else entries).append(e)
            return Claimed(entries, poison)
        return self._fcall("lb_claim", [self.keys.own(p), self.keys.queue(p), self.keys.crashes(p)],
                           [f"{worker}:{token}", worker], parse)

    def crashed(self, p: int, entry_ids: Sequence[str]) -> int:
        """A worker died while fetching these entries of ``q:{p}``: one try more each
        (entries acked meanwhile are skipped).  Result: how many were counted."""
        if not entry_ids:
            return self._add_const(0)
        return self._fcall("lb_crashed", [self.keys.queue(p), self.keys.crashes(p)], list(entry_ids), int)

    def ack(self, p: int, worker: str, token: int, done: Iterable[tuple[str, str]]) -> int:
        """XACK + XDEL ``(entry_id, outcome)`` pairs and count each outcome.

        ``outcome`` is ``"fetched"`` or a forget reason (counted as
        ``forgotten:<reason>``).  Result: how many were acked (an entry acked
        before counts nothing), or FENCED.
        """
        args: list[Any] = [f"{worker}:{token}"]
        for entry_id, outcome in done:
            args.extend((entry_id, outcome))
        return self._fcall("lb_ack", [self.keys.own(p), self.keys.queue(p), self.keys.counts(p),
                                      self.keys.crashes(p), self.keys.open], args,
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
        return self._fcall("lb_leave", [self.keys.members, self.keys.member(worker), self.keys.idle,
                                        self.keys.loads], [worker, instance or worker], lambda r: True)

    # --- the pace of the crawl: its end, the news, the expected workers, the shares ----
    def get_open(self) -> int:
        """URLs accepted and not yet acked over every partition (``open``; 0 when none
        was ever accepted): an int."""
        self._cmds.append(("GET", self.keys.open))
        return self._add(lambda r: 0 if r is None else int(r))

    def tell(self, worker: str, parts: Iterable[int]) -> int:
        """Tell ``worker`` that URLs were queued into its partitions ``parts`` (``news:<w>``)."""
        parts = sorted(set(parts))
        if not parts:
            return self._add_const(0)
        self._cmds.append(("SADD", self.keys.news(worker), *parts))
        return self._add(int)

    def take_news(self, worker: str) -> int:
        """The partitions others queued URLs into for ``worker`` since it last took them
        (read and emptied in the tick's transaction): a set of ints."""
        self._cmds.append(("SMEMBERS", self.keys.news(worker)))
        i = self._add(lambda r: {int(x) for x in r})
        self._cmds.append(("DEL", self.keys.news(worker)))
        self._add(lambda r: True)
        return i

    def get_expect(self) -> int:
        """The worker ids the launcher starts together (``expect``): a frozenset, empty when none."""
        self._cmds.append(("GET", self.keys.expect))
        return self._add(lambda r: frozenset(_s(r).split()) if r else frozenset())

    def put_load(self, worker: str, rate: float, backlog: int, capacity: float | None) -> int:
        """This worker's measured load, read by every worker's share computation."""
        cap = "-" if capacity is None else f"{capacity:.3f}"
        self._cmds.append(("HSET", self.keys.loads, worker, f"{rate:.3f} {int(backlog)} {cap}"))
        return self._add(lambda r: True)

    def get_loads(self) -> int:
        """Every worker's last load: ``{worker: (rate, backlog, capacity or None)}``."""
        self._cmds.append(("HGETALL", self.keys.loads))

        def parse(r):
            out = {}
            for w, v in _hash(r).items():
                try:
                    rate, backlog, cap = _s(v).split()
                    out[w] = (float(rate), int(backlog), None if cap == "-" else float(cap))
                except ValueError:
                    continue
            return out
        return self._add(parse)

    def get_shares(self) -> int:
        """The stored partition shares: ``(epoch or None, at ms, {worker: share})``."""
        self._cmds.append(("HGETALL", self.keys.shares))

        def parse(r):
            h = _hash(r)
            shares = {}
            for k, v in h.items():
                if k.startswith("w:"):
                    try:
                        shares[k[2:]] = int(v)
                    except ValueError:
                        continue
            try:
                epoch = int(h["epoch"]) if "epoch" in h else None
                at = int(h.get("at", 0))
            except ValueError:
                epoch, at = None, 0
            return epoch, at, shares
        return self._add(parse)

    def put_shares(self, expected: int | None, epoch: int, at_ms: int, shares: dict[str, int]) -> int:
        """Store the next shares if the record is still epoch ``expected``: True when written."""
        args: list[Any] = ["" if expected is None else str(expected), str(epoch), str(int(at_ms))]
        for w in sorted(shares):
            args.extend((w, int(shares[w])))
        return self._fcall("lb_shares", [self.keys.shares], args, lambda r: bool(int(r)))

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

    def prune_robots(self, p: int, worker: str, token: int, urls: Sequence[str]) -> int:
        """Fenced: drop expired robots.txt answers of the partition. How many left, or FENCED."""
        if not urls:
            return self._add_const(0)
        return self._fcall("lb_prune", [self.keys.own(p), self.keys.robots(p)], [f"{worker}:{token}", *urls],
                           lambda r: FENCED if _is_fenced(r) else int(r))

    def note_crashed(self, urls: Sequence[str], keep: int = 1000) -> int:
        """Name URLs forgotten as workerCrash in the crawl's list (the newest ``keep``)."""
        if not urls:
            return self._add_const(0)
        self._cmds.append(("LPUSH", self.keys.crashed, *urls))
        i = self._add(int)
        self._cmds.append(("LTRIM", self.keys.crashed, 0, keep - 1))
        self._add(lambda r: True)
        return i

    def get_crashed(self) -> int:
        """The URLs forgotten as workerCrash, newest first (at most the last 1,000)."""
        self._cmds.append(("LRANGE", self.keys.crashed, 0, -1))
        return self._add(lambda r: [_s(x) for x in r])

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

    def add_figures(self, worker: str, pages: int, paused: dict[str, float]) -> int:
        """Add to this worker's figures in ``figures``: pages acked, seconds paused by kind."""
        args: list[Any] = []
        if pages:
            self._cmds.append(("HINCRBY", self.keys.figures, f"{worker}:pages", int(pages)))
            args.append(self._add(lambda r: True))
        for kind, seconds in paused.items():
            self._cmds.append(("HINCRBYFLOAT", self.keys.figures, f"{worker}:paused:{kind}", round(seconds, 3)))
            args.append(self._add(lambda r: True))
        return args[0] if args else self._add_const(True)

    def get_figures(self) -> int:
        """Every worker's figures: ``{worker: {"pages": n, "paused": {kind: seconds}}}``."""
        self._cmds.append(("HGETALL", self.keys.figures))

        def parse(r):
            out: dict[str, dict] = {}
            for k, v in _hash(r).items():
                worker, _, what = k.partition(":")
                row = out.setdefault(worker, {"pages": 0, "paused": {}})
                if what == "pages":
                    row["pages"] = int(v)
                elif what.startswith("paused:"):
                    row["paused"][what[len("paused:"):]] = float(v)
            return out
        return self._add(parse)

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
            totals.recrawl = {k[len("recrawl:"):]: v for k, v in d.items() if k.startswith("recrawl:")}
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
        """Send the tick (one round trip, one transaction) and answer each operation's
        result, in order; see the module docstring for what is raised."""
        if not self._parsers:
            return []
        raw = await self._send()
        if any(_missing_function(r) for r in raw):
            # A Redis restarted without its data (or flushed) lost the library:
            # every FCALL of the tick failed and only plain, idempotent
            # commands ran, so the tick is sent again once the library is back.
            await self.io.load_library()
            raw = await self._send()
        failed = next((r for r in raw if isinstance(r, Exception)), None)
        if failed is not None:
            refused = RedisRefused(self.io.url_shown, failed)
            if refused.kind in FAILOVER_KINDS:
                self.io.rediscover = True
            raise refused
        return [parser(r) for parser, r in zip(self._parsers, raw)]

    async def _send(self) -> list[Any]:
        """The tick's commands between the MULTI opened before and EXEC, then ``WAIT``
        when replicas are asked for, then the next tick's MULTI (see the module
        docstring): the commands' results."""
        io = self.io
        if io.rediscover:
            await io.follow_failover()
        pipe = io.pipe
        n = len(self._cmds)
        tail: list[tuple] = [("EXEC",)]
        if io.replicas:
            tail.append(("WAIT", io.replicas, REPLICA_WAIT_MS))
        tail.append(("MULTI",))
        try:
            if not pipe.in_multi:  # a new connection: open the transaction first
                io.round_trips += 1
                opened = (await pipe.execute([("MULTI",)]))[0]
                if isinstance(opened, Exception):
                    pipe.close()
                    return [opened] * n  # refused (loading, busy...): nothing of the tick was sent
                pipe.in_multi = True
            io.round_trips += 1
            pipe.in_multi = False
            raw = await pipe.execute([*self._cmds, *tail])
        except _CONNECTION_ERRORS as exc:
            io.rediscover = io.sentinels is not None
            raise RedisUnavailable(f"Redis at {io.url_shown} unreachable: {exc}") from exc
        done, multi = raw[n], raw[-1]
        results = unwrap_transaction(raw[:n], done)
        if isinstance(done, Exception) or isinstance(multi, Exception):
            pipe.close()  # the server's transaction state is not known: start clean
        else:
            pipe.in_multi = True
        if io.replicas and not isinstance(done, Exception):
            acked = raw[n + 1]
            if isinstance(acked, Exception) or int(acked) < io.replicas:
                # Done on the master, not (yet) on enough replicas: it does not count; sent
                # again (idempotent), it waits for them again.
                got = acked if isinstance(acked, Exception) else f"{int(acked)} of {io.replicas} replicas"
                raise RedisReplicasBehind(f"Redis at {io.url_shown}: a tick reached {got} "
                                          f"within {REPLICA_WAIT_MS} ms (redisReplicas)")
        return results


def _ms(seconds: float) -> int:
    return max(1, int(round(seconds * 1000)))


try:  # redis-py's connection and reply errors
    import redis.exceptions as _rex

    _CONNECTION_ERRORS: tuple[type[BaseException], ...] = (_rex.ConnectionError, _rex.TimeoutError, OSError)
    _REPLY_ERRORS: tuple[type[BaseException], ...] = (_rex.RedisError,)
except ImportError:  # pragma: no cover - redis is a dependency
    _CONNECTION_ERRORS = (OSError,)
    _REPLY_ERRORS = ()


class RedisIO:
    """One worker's (or the launcher's) connection to the crawl's Redis."""

    def __init__(self, url: str, crawl: str = "larbin", *, partitions: int = 256, seen_buckets: int = 128,
                 timeout: float = 5.0, replicas: int = 0) -> None:
        self.url = url
        self.keys = Keys(crawl)
        self.crawl = crawl
        self.partitions = partitions
        self.seen_buckets = seen_buckets
        self.timeout = timeout
        #: ``redisReplicas``: each tick ends with ``WAIT replicas`` (a failover loses nothing).
        self.replicas = replicas
        self.round_trips = 0
        self.instance = secrets.token_hex(6)  # this process, for member and IP lease values
        self.client = None
        self.pipe = None  # the ticks' connection (larbin_py.distributed.resp)
        self._blocking = None  # the second connection (XREAD BLOCK)
        self.target = None  # the parsed URL (larbin_py.distributed.sentinel.RedisTarget)
        self.sentinels = None  # a redis+sentinel:// URL's discovery, which keeps its order
        #: The data node's URL: the URL itself, or the master the sentinels named.
        self.data_url = url
        #: A tick failed in a way that may mean a failover: ask the sentinels again first.
        self.rediscover = False
        #: Failovers followed (the master found at another address).
        self.failovers = 0

    @property
    def url_shown(self) -> str:
        """The URL without a password, for messages."""
        from ..redact import redact_url

        return redact_url(self.url)

    def _make_client(self, timeout: float | None):
        import redis.asyncio as aredis

        return aredis.from_url(self.data_url, socket_timeout=timeout, socket_connect_timeout=self.timeout,
                               health_check_interval=0)

    async def connect(self) -> "RedisIO":
        """Connect (through the sentinels for a ``redis+sentinel://`` URL), check the
        server, load the function library (one round trip each)."""
        from .sentinel import Sentinels, parse_redis_url

        try:
            self.target = parse_redis_url(self.url)
        except ValueError as exc:
            raise RedisUnavailable(str(exc)) from exc
        if self.target.is_sentinel:
            self.sentinels = Sentinels(self.target)
            await self._discover()
        await self._open()
        return self

    async def _discover(self) -> None:
        """The master's address from the sentinels (``data_url``); RedisUnavailable when none names one."""
        from .sentinel import SentinelError

        try:
            address = await self.sentinels.master(self.timeout)
        except SentinelError as exc:
            raise RedisUnavailable(str(exc)) from exc
        self.data_url = self.target.data_url(address)

    async def _open(self) -> None:
        from .resp import Pipe

        self.client = self._make_client(self.timeout)
        self.pipe = Pipe(self.data_url, self.timeout)
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
        except _REPLY_ERRORS as exc:
            await self.close()
            raise RedisRefused(self.url_shown, exc, "INFO") from exc
        except RedisFailed:
            await self.close()
            raise

    async def follow_failover(self) -> None:
        """After a tick failed (unreachable, READONLY, MASTERDOWN) on a sentinel URL: ask
        the sentinels where the master is; a new one gets new connections (the library
        loaded on them).  RedisUnavailable while none answers."""
        self.rediscover = False
        if self.sentinels is None:
            return
        old = self.data_url
        try:
            await self._discover()
        except RedisFailed:
            self.rediscover = True
            raise
        if self.data_url != old or self.client is None or self.pipe is None:
            await self.close()
            try:
                await self._open()
            except RedisFailed:
                self.rediscover = True
                raise
            if self.data_url != old:
                self.failovers += 1

    async def load_library(self) -> None:
        """``FUNCTION LOAD REPLACE`` of larbin.lua (one round trip); RedisFailed when refused."""
        self.round_trips += 1
        try:
            await self.client.execute_command("FUNCTION", "LOAD", "REPLACE", library_code())
        except _CONNECTION_ERRORS as exc:
            raise RedisUnavailable(f"Redis at {self.url_shown} unreachable: {exc}") from exc
        except _REPLY_ERRORS as exc:
            raise RedisRefused(self.url_shown, exc, "FUNCTION LOAD") from exc

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

    async def set_expect(self, workers: Sequence[str]) -> None:
        """Name the workers started together (the launcher): each acquires its partitions
        as soon as it sees them all, instead of waiting two heartbeats."""
        self.round_trips += 1
        await self.client.set(self.keys.expect, " ".join(workers))

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
        try:
            return await self.client.info(section) if section else await self.client.info()
        except _CONNECTION_ERRORS as exc:
            raise RedisUnavailable(f"Redis at {self.url_shown} unreachable: {exc}") from exc
        except _REPLY_ERRORS as exc:
            raise RedisRefused(self.url_shown, exc, "INFO") from exc

    async def crashed(self, tags_by_partition: dict[int, list[str]]) -> int:
        """One try more for each entry whose request was running when a worker died
        (larbin_py.distributed.inflight): how many were still queued and counted."""
        t = self.tick()
        idx = [t.crashed(p, ids) for p, ids in tags_by_partition.items() if ids]
        if not idx:
            return 0
        res = await t.execute()
        return sum(res[i] for i in idx)
