"""The Redis functions of the distributed mode, on a real redis-server (the fixture).

Each test gets its own redis-server on a unix socket (tests/conftest.py).
Lease expiry is simulated by deleting the lease key where the test is about
fencing (a deterministic "the lease ran out"), and waited for (polling the
key's PTTL with a deadline) where the test is about expiry itself.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aredis

from larbin_py.distributed.keys import Keys, bucket_of, signed64
from larbin_py.distributed.membership import Membership, MembershipError
from larbin_py.distributed.membership_redis import RedisMembership
from larbin_py.distributed.redisio import (
    CRASH_LIMIT, FENCED, CrawlExists, CrawlMeta, CrawlMismatch, RedisIO, RedisUnavailable,
)
from larbin_py.distributed.termination import Termination

META = CrawlMeta(8, 16, {"waitDuration": "0", "depth": "5"})


async def connect(server, crawl="t", meta=META) -> RedisIO:
    io = await RedisIO(server.url, crawl).connect()
    await io.join_crawl(meta)
    return io


def raw(server) -> aredis.Redis:
    return aredis.Redis(unix_socket_path=server.socket_path)


async def wait_until(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not await pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


# --- meta -----------------------------------------------------------------

async def test_a_fresh_start_refuses_an_existing_crawl(redis_server):
    io = await RedisIO(redis_server.url, "mycrawl").connect()
    await io.create_crawl(META)
    with pytest.raises(CrawlExists, match="'mycrawl'.*--reload"):
        await io.create_crawl(META)
    assert await io.create_crawl(META, reload=True) == META
    other = await RedisIO(redis_server.url, "othercrawl").connect()
    await other.create_crawl(META)  # another crawlName is another crawl
    await io.close(), await other.close()


async def test_a_joiner_with_other_settings_is_refused_naming_the_keys(redis_server):
    io = await connect(redis_server)
    joiner = await RedisIO(redis_server.url, "t").connect()
    differing = CrawlMeta(8, 16, {"waitDuration": "2", "depth": "5"})
    with pytest.raises(CrawlMismatch, match=r"waitDuration \(crawl: '0', here: '2'\)"):
        await joiner.join_crawl(differing)
    with pytest.raises(CrawlMismatch, match="partitions"):
        await joiner.join_crawl(CrawlMeta(16, 16, META.rules))
    assert await joiner.join_crawl(META) == META
    assert joiner.partitions == 8 and joiner.seen_buckets == 16
    await io.close(), await joiner.close()


async def test_unreachable_redis_names_the_url(tmp_path):
    url = f"unix://{tmp_path}/nothing.sock"
    with pytest.raises(RedisUnavailable, match="nothing.sock"):
        await RedisIO(url, "t", timeout=1.0).connect()
    with pytest.raises(RedisUnavailable, match="expected redis://"):
        await RedisIO("http://localhost:6379", "t").connect()


# --- enqueue ----------------------------------------------------------------

async def test_enqueue_is_exact_across_batches(redis_server):
    io = await connect(redis_server)
    fps = [(i * 0x9E3779B97F4A7C15) % (1 << 64) for i in range(1, 2001)]  # spread over the 64 bits
    assert await io.enqueue(3, [(fp, b"r%d" % i) for i, fp in enumerate(fps[:1200])]) == 1200
    # a second batch overlapping the first: only the new ones count
    assert await io.enqueue(3, [(fp, b"again") for fp in fps[1000:]]) == 800
    # the same fingerprint twice in one batch is queued once
    assert await io.enqueue(3, [(7, b"a"), (7, b"b")]) == 1
    r = raw(redis_server)
    k = Keys("t")
    assert await r.xlen(k.queue(3)) == 2001
    assert int(await r.hget(k.counts(3), "accepted")) == 2001
    # never a false "seen": every fingerprint is a member of its own bucket, as a signed int64
    for fp in fps[::97]:
        assert await r.sismember(k.seen(3, bucket_of(fp, 16)), signed64(fp))
    # the buckets stay intsets (8 bytes per member), high fingerprints included
    assert all([await r.object("encoding", k.seen(3, b)) == b"intset" for b in range(16)])
    await io.close()


async def test_enqueue_is_atomic_under_concurrent_callers(redis_server):
    ios = [await connect(redis_server) for _ in range(4)]
    fps = list(range(1, 3001))

    async def sender(io, offset):
        # each caller sends every fingerprint, in its own order and batch sizes
        order = fps[offset:] + fps[:offset]
        new = 0
        for i in range(0, len(order), 100 + offset % 37):
            new += await io.enqueue(5, [(fp, b"x") for fp in order[i:i + 100 + offset % 37]])
        return new

    news = await asyncio.gather(*(sender(io, off) for io, off in zip(ios, (0, 750, 1500, 2250))))
    assert sum(news) == 3000  # each URL accepted exactly once over all callers
    assert await raw(redis_server).xlen(Keys("t").queue(5)) == 3000
    for io in ios:
        await io.close()


# --- leases and fencing -------------------------------------------------------

async def test_acquire_gives_increasing_tokens_and_refuses_a_held_lease(redis_server):
    io = await connect(redis_server)
    t1 = await io.acquire(0, "w1", 5)
    assert t1 == 1
    assert await io.acquire(0, "w2", 5) is None
    assert await io.release(0, "w1", t1) is True
    t2 = await io.acquire(0, "w2", 5)
    assert t2 == 2
    # a respawned w2 (same id) takes its own lease again with a new token, fencing the old process
    t3 = await io.acquire(0, "w2", 5)
    assert t3 == 3
    assert await io.read(0, "w2", t2, 10) is FENCED
    await io.close()


async def test_a_stale_token_is_fenced_everywhere_and_changes_nothing(redis_server):
    io = await connect(redis_server)
    r = raw(redis_server)
    k = Keys("t")
    await io.enqueue(1, [(i, b"u%d" % i) for i in range(1, 11)])
    old = await io.acquire(1, "w1", 5)
    entries = await io.read(1, "w1", old, 4)
    assert len(entries) == 4
    await r.delete(k.own(1))  # w1 paused past its lease ...
    new = await io.acquire(1, "w2", 5)  # ... and w2 took the partition over
    assert new > old
    assert await io.read(1, "w1", old, 10) is FENCED
    assert await io.ack(1, "w1", old, [(e.id, "fetched") for e in entries]) is FENCED
    assert await io.claim(1, "w1", old) is FENCED
    assert await io.release(1, "w1", old) is FENCED
    t = io.tick()
    t.put_robots(1, "w1", old, {"h.test": b"allow"})
    t.put_sitewait(1, "w1", old, {"h.test": b"1.5"})
    assert await t.execute() == [FENCED, FENCED]
    # nothing changed: the entries are still pending, nothing counted, no robots written, w2 holds the lease
    assert (await r.xpending(k.queue(1), "crawl"))["pending"] == 4
    assert await r.hget(k.counts(1), "fetched") is None
    assert await r.hgetall(k.robots(1)) == {}
    assert await r.get(k.own(1)) == b"w2:%d" % new
    # the new owner takes the pending entries over and acks them
    claimed = await io.claim(1, "w2", new)
    assert sorted(e.id for e in claimed.entries) == sorted(e.id for e in entries)
    assert await io.ack(1, "w2", new, [(e.id, "fetched") for e in claimed.entries]) == 4
    await io.close()


async def test_claim_takes_every_pending_entry_of_every_consumer(redis_server):
    io = await connect(redis_server)
    await io.enqueue(2, [(i, b"u%d" % i) for i in range(1, 2601)])
    tok = await io.acquire(2, "w1", 5)
    got = await io.read(2, "w1", tok, 1500)  # more than one XAUTOCLAIM page
    await raw(redis_server).delete(Keys("t").own(2))
    tok2 = await io.acquire(2, "w2", 5)
    got += await io.read(2, "w2", tok2, 700)
    await raw(redis_server).delete(Keys("t").own(2))
    tok3 = await io.acquire(2, "w3", 5)
    claimed = await io.claim(2, "w3", tok3)
    assert sorted(e.id for e in claimed.entries) == sorted(e.id for e in got)
    assert {e.record for e in claimed.entries} == {e.record for e in got}
    assert all(e.crashes == 0 for e in claimed.entries)  # a claim is not a try
    # the rest is still new for the owner; consumers with nothing pending are gone
    rest = await io.read(2, "w3", tok3, 1000)
    assert len(rest) == 400
    consumers = await raw(redis_server).xinfo_consumers(Keys("t").queue(2), "crawl")
    assert {c["name"] for c in consumers} == {b"w3"}
    await io.close()


async def test_claims_are_not_tries_only_crashes_count_and_the_limit_reports_a_poison_entry(redis_server):
    io = await connect(redis_server)
    await io.enqueue(4, [(11, b"poison"), (12, b"fine"), (13, b"read ahead")])
    tok = await io.acquire(4, "w1", 5)
    first = await io.read(4, "w1", tok, 3)
    assert [e.record for e in first] == [b"poison", b"fine", b"read ahead"]
    ids = {e.record: e.id for e in first}
    # ten takeovers and self-claims of entries never fetched: no try counted
    for _ in range(10):
        claimed = await io.claim(4, "w1", tok)
        assert [e.crashes for e in claimed.entries] == [0, 0, 0] and claimed.poison == []
    # the worker dies while fetching "poison": one try each time
    for n in range(1, CRASH_LIMIT + 1):
        assert await io.crashed({4: [ids[b"poison"]]}) == 1
        claimed = await io.claim(4, "w1", tok)
        if n < CRASH_LIMIT:
            assert [(e.record, e.crashes) for e in claimed.entries][0] == (b"poison", n)
            assert claimed.poison == []
    assert [(e.record, e.crashes) for e in claimed.poison] == [(b"poison", CRASH_LIMIT)]
    assert [e.record for e in claimed.entries] == [b"fine", b"read ahead"]
    assert await io.ack(4, "w1", tok, [(claimed.poison[0].id, "workerCrash")]) == 1
    # an entry acked meanwhile is not counted, and its count left with its ack
    assert await io.crashed({4: [ids[b"poison"]]}) == 0
    assert await raw(redis_server).hgetall(Keys("t").crashes(4)) == {}
    view = await io.view()
    assert view.totals.forgotten == {"workerCrash": 1}
    assert view.totals.balanced and view.totals.queued == 2
    await io.close()


async def test_counters_balance_at_every_step(redis_server):
    io = await connect(redis_server)
    t = io.tick()
    for p in range(8):
        t.enqueue(p, [(p * 1000 + i, b"u") for i in range(1, 51)])
    await t.execute()
    tokens = {p: await io.acquire(p, "w1", 5) for p in range(8)}
    view = await io.view()
    assert view.totals.accepted == 400 and view.totals.queued == 400 and view.totals.balanced
    for p, tok in tokens.items():
        entries = await io.read(p, "w1", tok, 30)
        t = io.tick()
        t.enqueue(p, [(p * 1000 + 500 + i, b"link") for i in range(5)])  # links before the ack
        t.ack(p, "w1", tok, [(e.id, "fetched" if i % 3 else "err40X") for i, e in enumerate(entries)])
        t.ack(p, "w1", tok, [(entries[0].id, "fetched")])  # a repeated ack counts nothing
        res = await t.execute()
        assert res[1:] == [30, 0]
        v = await io.view()
        assert v.totals.balanced, v.totals
    v = await io.view(rows=True)
    assert v.totals.accepted == 440 and v.totals.fetched == 160 and v.totals.forgotten == {"err40X": 80}
    assert v.totals.queued == 200 and v.totals.pending == 0
    assert [r.owner for r in v.rows] == ["w1"] * 8 and sum(r.accepted for r in v.rows) == 440
    await io.close()


# --- heartbeat, membership --------------------------------------------------------

async def test_heartbeat_renews_held_leases_and_reports_lost_ones(redis_server):
    io = await connect(redis_server)
    r = raw(redis_server)
    k = Keys("t")
    held = {p: await io.acquire(p, "w1", 0.5) for p in range(3)}
    await r.delete(k.own(1))
    stolen = await io.acquire(1, "w2", 5)
    hb = await io.heartbeat("w1", 5, held)
    assert hb.lost == [1] and hb.members == frozenset({"w1"})
    assert 4000 < await r.pttl(k.own(0)) <= 5000  # renewed from 0.5 s to 5 s
    assert await r.get(k.own(1)) == b"w2:%d" % stolen
    await io.close()


async def test_membership_follows_joins_and_expiry(redis_server):
    io1, io2 = await connect(redis_server), await connect(redis_server)
    m1, m2 = RedisMembership(io1, 0.4), RedisMembership(io2, 0.4)
    assert isinstance(m1, Membership)
    seen = []
    m1.watch(seen.append)
    await m1.join("w1")
    await m2.join("w2")
    await m1.heartbeat()
    assert m1.members() == {"w1", "w2"} and m1.alive
    assert seen[-1] == {"w1", "w2"} and "w2 joined" in m1.last_change[1]
    # w2 goes silent: its key expires on Redis's clock and w1's heartbeat drops it
    async def w2_gone():
        await m1.heartbeat()
        return m1.members() == {"w1"}
    await wait_until(w2_gone)
    assert "w2 left" in m1.last_change[1]
    # w2's own view: no longer alive once its lease may have lapsed
    assert not m2.alive
    await m1.leave()
    await io1.close(), await io2.close()


async def test_alive_turns_false_before_the_lease_can_be_taken(redis_server):
    io = await connect(redis_server)
    now = [100.0]
    m = RedisMembership(io, 10.0, margin=2.0, clock=lambda: now[0])
    await m.join("w1")
    now[0] = 107.9
    assert m.alive
    now[0] = 108.0  # renewed_at + ttl - margin: another worker's takeover is 2 s away
    assert not m.alive
    await io.close()


async def test_a_live_worker_id_is_refused_and_a_dead_one_reused(redis_server):
    io1, io2 = await connect(redis_server), await connect(redis_server)
    m1 = RedisMembership(io1, 0.5)
    await m1.join("w1")
    with pytest.raises(MembershipError, match="'w1' is held by a live worker"):
        await RedisMembership(io2, 0.5, join_wait=0.0).join("w1")
    # w1 dies (no more heartbeats): a respawn with the same id gets in once the key expires
    m2 = RedisMembership(io2, 0.5)
    await m2.join("w1")
    assert m2.alive and m2.members() == {"w1"}
    await m1.heartbeat()  # the old process learns it was replaced
    assert m1.duplicate and not m1.alive
    await io1.close(), await io2.close()


# --- IP leases ------------------------------------------------------------------------

async def test_ip_lease_handover_carries_last_start_and_pace(redis_server):
    io = await connect(redis_server)
    first = await io.ip_acquire("10.0.0.1", "w1/a", 5)
    assert first.granted and first.last_start_ms is None and first.clean
    denied = await io.ip_acquire("10.0.0.1", "w2/b", 5)
    assert not denied.granted and 0 < denied.retry_in_ms <= 5000
    renewed = await io.ip_acquire("10.0.0.1", "w1/a", 5)
    assert renewed.granted and renewed.wanted  # w2 waits: the holder learns it at renewal
    assert await io.ip_release("10.0.0.1", "w2/b", 1, b"x") is False  # not w2's to release
    assert await io.ip_release("10.0.0.1", "w1/a", 1764063000123, b'{"penalty":2.0,"srtt":0.05}') is True
    second = await io.ip_acquire("10.0.0.1", "w2/b", 5)
    assert second.granted and second.clean
    assert second.last_start_ms == 1764063000123
    assert second.pace == b'{"penalty":2.0,"srtt":0.05}'
    await io.close()


async def test_an_expired_ip_lease_is_not_clean(redis_server):
    io = await connect(redis_server)
    r = raw(redis_server)
    assert (await io.ip_acquire("10.0.0.2", "w1/a", 0.05)).granted

    async def expired():
        return await r.pttl(Keys("t").ip("10.0.0.2")) == -2
    await wait_until(expired)
    grant = await io.ip_acquire("10.0.0.2", "w2/b", 5)
    assert grant.granted and not grant.clean  # w1's last request is unknown: wait a full delay
    await io.close()


# --- robots, site waits, stats -------------------------------------------------------

async def test_robots_and_site_waits_move_with_the_partition(redis_server):
    io = await connect(redis_server)
    tok = await io.acquire(6, "w1", 5)
    t = io.tick()
    t.put_robots(6, "w1", tok, {"a.test": b"disallow /x", "b.test": b""})
    t.put_sitewait(6, "w1", tok, {"a.test": "1764063000.5", "c.test": "1"})
    t.put_sitewait(6, "w1", tok, {"a.test": "1764063001.5"})  # a snapshot replaces the last
    assert await t.execute() == [True, True, True]
    t = io.tick()
    t.get_robots(6), t.get_sitewait(6)
    robots, waits = await t.execute()
    assert robots == {"a.test": b"disallow /x", "b.test": b""}
    assert waits == {"a.test": b"1764063001.5"}
    await io.close()


async def test_stats_snapshots_live_per_worker(redis_server):
    io = await connect(redis_server)
    t = io.tick()
    t.put_stats("w1", {"pages": {"fetched": 3}})
    t.put_stats("w2", {"pages": {"fetched": 4}}, ttl=0.001)
    t.put_outpos("w1", "12:345")
    await t.execute()

    async def w2_gone():
        t = io.tick()
        t.get_stats(["w1", "w2"])
        return (await t.execute())[0] == {"w1": {"pages": {"fetched": 3}}}
    await wait_until(w2_gone)
    t = io.tick()
    t.get_outpos("w1"), t.get_outpos("w9")
    assert await t.execute() == ["12:345", None]
    await io.close()


# --- round trips -------------------------------------------------------------------------

async def test_a_tick_is_one_round_trip_client_and_server_side(redis_server):
    io = await connect(redis_server)
    tok = await io.acquire(0, "w1", 5)
    await io.enqueue(0, [(i, b"u") for i in range(1, 101)])
    entries = await io.read(0, "w1", tok, 50)
    before_server = (await io.info("stats"))["total_reads_processed"]
    before_client = io.round_trips
    t = io.tick()
    t.enqueue(0, [(1000 + i, b"link") for i in range(20)])
    t.ack(0, "w1", tok, [(e.id, "fetched") for e in entries])
    t.read(0, "w1", tok, 50)
    t.heartbeat("w1", 5, {0: tok})
    t.ip_acquire("10.1.1.1", "w1/a", 5)
    t.put_stats("w1", {"x": 1})
    t.report("w1", 1, False)
    results = await t.execute()
    after_server = (await io.info("stats"))["total_reads_processed"]
    assert len(results) == 7 and results[0] == 20 and results[1] == 50 and len(results[2]) == 50
    assert io.round_trips - before_client == 2  # the tick and the second INFO
    assert after_server - before_server == 2  # the tick (one read) and the second INFO
    await io.close()


# --- termination ---------------------------------------------------------------------------

async def test_termination_needs_two_quiet_waves_with_unchanged_totals(redis_server):
    io = await connect(redis_server)
    tok = await io.acquire(0, "w1", 5)
    await io.enqueue(0, [(1, b"only")])
    term = Termination()

    async def look(seqs_idle):
        t = io.tick()
        for w, (seq, idle) in seqs_idle.items():
            t.report(w, seq, idle)
        t.view()
        v = (await t.execute())[-1]
        return term.observe(frozenset(seqs_idle), v.reports, v.totals)

    # idle reports, but a URL is queued: not the end
    assert not await look({"w1": (1, True), "w2": (1, True)})
    entries = await io.read(0, "w1", tok, 10)
    assert not await look({"w1": (2, True), "w2": (2, True)})  # read, not acked: still queued
    await io.ack(0, "w1", tok, [(entries[0].id, "fetched")])
    assert not await look({"w1": (3, True), "w2": (3, True)})  # first quiet wave
    assert term.waves == 1
    assert not await look({"w1": (4, True), "w2": (3, True)})  # w2 has not reported again
    assert await look({"w1": (4, True), "w2": (4, True)})  # second quiet wave, same totals: ended
    await io.close()


class _T:
    """Totals for the sans-I/O termination tests."""

    def __init__(self, accepted, done, queued=0):
        self.accepted, self.done, self.queued = accepted, done, queued

    def key(self):
        return (self.accepted, self.done, self.queued)


def test_termination_restarts_when_totals_change_between_waves():
    term = Termination()
    ws = frozenset({"a", "b"})
    assert not term.observe(ws, {"a": (1, True), "b": (1, True)}, _T(10, 10))
    # between the waves someone fetched and enqueued: a new first wave
    assert not term.observe(ws, {"a": (2, True), "b": (2, True)}, _T(12, 12))
    assert term.waves == 1
    assert term.observe(ws, {"a": (3, True), "b": (3, True)}, _T(12, 12))


def test_termination_restarts_on_a_busy_member_or_a_new_member():
    term = Termination()
    ws = frozenset({"a", "b"})
    assert not term.observe(ws, {"a": (1, True), "b": (1, True)}, _T(5, 5))
    assert not term.observe(ws, {"a": (2, True), "b": (2, False)}, _T(5, 5))
    assert term.waves == 0
    assert not term.observe(ws, {"a": (3, True), "b": (3, True)}, _T(5, 5))
    grown = ws | {"c"}
    assert not term.observe(grown, {"a": (4, True), "b": (4, True), "c": (1, True)}, _T(5, 5))
    assert term.waves == 1  # the member set changed: the wave starts over
    assert term.observe(grown, {"a": (5, True), "b": (5, True), "c": (2, True)}, _T(5, 5))


def test_termination_never_with_work_queued_or_unbalanced_or_no_members():
    term = Termination()
    ws = frozenset({"a"})
    for seq in range(1, 5):
        assert not term.observe(ws, {"a": (seq, True)}, _T(5, 4, queued=1))
        assert not term.observe(ws, {"a": (seq, True)}, _T(5, 4))
        assert not term.observe(frozenset(), {}, _T(0, 0))
    assert not term.observe(ws, {}, _T(0, 0))  # a member that never reported is not idle


async def test_wait_new_wakes_on_an_enqueue_to_a_watched_partition(redis_server):
    io, sender = await connect(redis_server), await connect(redis_server)
    waiter = asyncio.ensure_future(io.wait_new({3: "$", 4: "$"}, timeout=10))
    await asyncio.sleep(0)  # let the XREAD BLOCK be sent; the enqueue below wakes it whenever it lands

    async def blocked():
        clients = await raw(redis_server).client_list()
        return any(c.get("cmd") == "xread" for c in clients)
    await wait_until(blocked)
    await sender.enqueue(5, [(1, b"elsewhere")])  # not watched
    await sender.enqueue(4, [(2, b"here")])
    assert await asyncio.wait_for(waiter, 5) == [4]
    assert await io.wait_new({3: "$"}, timeout=0.05) == []  # nothing new: the timeout
    await io.close(), await sender.close()


async def test_a_redis_that_lost_the_library_gets_it_again(redis_server):
    io = await connect(redis_server)
    await raw(redis_server).execute_command("FUNCTION", "FLUSH")  # a Redis restarted without its data
    t = io.tick()
    t.report("w1", 1, True)
    t.enqueue(0, [(1, b"u")])
    t.get_robots(0)
    before = io.round_trips
    assert await t.execute() == [True, 1, {}]
    assert io.round_trips - before == 3  # the tick, the library, the tick again
    assert await io.enqueue(0, [(1, b"u"), (2, b"v")]) == 1
    await io.close()


async def test_a_recrawl_s_verdicts_are_counted_with_the_ack_once(redis_server):
    """``fetched;unchanged,notModified``: the outcome counted as ``fetched`` and each verdict
    under ``recrawl:``, in the same fenced call; an ack repeated (a tick sent again) counts
    nothing more, and a fenced one nothing at all."""
    io = await connect(redis_server)
    await io.enqueue(2, [(i, b"u") for i in range(1, 5)])
    tok = await io.acquire(2, "w1", 5)
    entries = await io.read(2, "w1", tok, 4)
    done = [(entries[0].id, "fetched;unchanged,notModified"), (entries[1].id, "fetched;changed"),
            (entries[2].id, "err40X;gone"), (entries[3].id, "fetched")]
    assert await io.ack(2, "w2", tok, done) is FENCED
    assert (await io.view()).totals.recrawl == {}
    assert await io.ack(2, "w1", tok, done) == 4
    assert await io.ack(2, "w1", tok, done[:2]) == 0
    t = (await io.view()).totals
    assert t.fetched == 3 and t.forgotten == {"err40X": 1} and t.balanced
    assert t.recrawl == {"unchanged": 1, "notModified": 1, "changed": 1, "gone": 1}
    await io.close()
