"""The coordinator's own bookkeeping against a real redis-server: one worker's
DistState and Engine built as ``run_worker`` builds them, ticks driven by
the test (no crawl runs).

* robots.txt answers leave ``robots:{p}`` once expired: those found expired
  at a takeover, and those this worker holds when their day is over;
* a stop releases every partition held, those acquired by the tick under
  way when it was called included;
* after a stop, no tick but the final one is sent (a late one re-registered
  the worker it had just removed).
"""

from __future__ import annotations

import asyncio
import io

import redis.asyncio as aredis

from larbin_py import robots as robots_mod
from larbin_py.config import Config
from larbin_py.distributed.keys import Keys
from larbin_py.distributed.partition import partition_of
from larbin_py.distributed.redisio import RedisIO
from larbin_py.distributed.shared import crawl_meta
from larbin_py.distributed.crawl_worker import DistState
from larbin_py.engine import Engine

from helpers.distributed import wait_for

CRAWL = "t"


async def a_worker(tmp_path, url: str, partitions: int = 4):
    config = Config(state_dir=str(tmp_path / "state"), save_dir=str(tmp_path / "save"), redis_url=url,
                    crawl_name=CRAWL, partitions=partitions, lease_ttl=2.0, dns_servers=(("127.0.0.1", 53),),
                    http_port=0, output_mode="none")
    rio = await RedisIO(url, CRAWL, partitions=partitions).connect()
    await rio.join_crawl(crawl_meta(config))
    err = io.StringIO()
    state = DistState(config, rio, "w1", err=err)
    engine = Engine(config, crawl_state=state, err=err, out=err)
    return rio, state, engine


async def test_expired_robots_answers_leave_redis_at_a_takeover_and_when_their_day_is_over(tmp_path, redis_server):
    rio, state, engine = await a_worker(tmp_path, redis_server.url)
    coord = state.coordinator
    wall = [1_000_000.0]
    coord.wall = lambda: wall[0]
    host = "site.test"
    p = partition_of(host, 4)
    r = aredis.from_url(redis_server.url)
    key = Keys(CRAWL).robots(p)
    day = robots_mod.CACHE_TTL
    await r.hset(key, mapping={
        f"http://{host}/robots.txt": b"A%r\n" % (wall[0] - day - 1),  # expired a second ago
        "http://other.test/robots.txt": b"B%r\nUser-agent: *\nDisallow: /x\n" % (wall[0] - day + 5),  # 5 s left
    })
    try:
        await coord.start()
        coord.started -= 100  # past the first heartbeats' wait: take the partitions now
        coord.acquire_now = True
        for _ in range(3):  # acquire, then claim and load the answers, then prune
            coord.next_hb = 0.0
            await coord.tick()
        assert p in coord.held and coord.robots.loaded == 1
        assert await r.hkeys(key) == [b"http://other.test/robots.txt"]
        wall[0] += 6  # the other's day is over too
        coord.next_hb = 0.0
        await coord.tick()
        assert await r.exists(key) == 0 and coord.robots.pruned == 2
        # an answer this worker stores lives its day, then leaves
        coord.robots_answer(f"http://{host}/robots.txt", wall[0], None)
        coord.next_hb = 0.0
        await coord.tick()
        assert await r.hkeys(key) == [f"http://{host}/robots.txt".encode()]
        wall[0] += day + 1
        coord.next_hb = 0.0
        await coord.tick()
        assert await r.exists(key) == 0
        await coord.stop()
    finally:
        await r.aclose()
        await rio.close()
        state.close(engine.frontier, broken=False)


async def test_a_stop_releases_the_partitions_the_tick_under_way_acquired(tmp_path, redis_server):
    rio, state, engine = await a_worker(tmp_path, redis_server.url)
    coord = state.coordinator
    keys = Keys(CRAWL)
    r = aredis.from_url(redis_server.url)
    try:
        await coord.start()
        coord.started -= 100  # past the first heartbeats' wait
        coord.acquire_now = True
        coord.next_hb = 0.0
        # Redis serves no client for 0.5 s: the tick that acquires waits for its answer
        await r.execute_command("CLIENT", "PAUSE", 500, "ALL")
        running = asyncio.ensure_future(coord.tick())
        await wait_for(coord._tick_lock.locked, 5, "the tick did not start", step=0.001)
        await coord.stop()  # called while the acquisitions are under way
        await running
        assert coord.stats()["takeovers"] == 4  # the running tick took all four
        assert coord.held == {}
        assert [p for p in range(4) if await r.exists(keys.own(p))] == []  # released, not left to expire
    finally:
        await r.aclose()
        await rio.close()
        state.close(engine.frontier, broken=False)


async def test_no_tick_but_the_final_one_is_sent_after_a_stop(tmp_path, redis_server):
    rio, state, engine = await a_worker(tmp_path, redis_server.url)
    coord = state.coordinator
    r = aredis.from_url(redis_server.url)
    try:
        await coord.start()
        await coord.stop()
        assert await r.exists(Keys(CRAWL).member("w1")) == 0  # it left the crawl
        trips = rio.round_trips
        coord.next_hb = 0.0  # a heartbeat due, as for a tick that waited for the lock during the stop
        await coord.tick()
        assert rio.round_trips == trips
        assert await r.exists(Keys(CRAWL).member("w1")) == 0  # not registered again
    finally:
        await r.aclose()
        await rio.close()
        state.close(engine.frontier, broken=False)


async def test_kept_alive_connections_close_when_an_ip_lease_is_refused_or_the_leases_are_suspended(
        tmp_path, redis_server):
    """One connection per IP across workers: a renewal refused (another worker holds the IP
    now) closes this worker's kept-alive connections to it at once, and so does the moment
    its leases are suspended (a worker woken from SIGSTOP past its leases: they may be
    another's), without waiting for a release that will not come; and past the leases'
    deadline the fetcher's gate lets no request out on a new connection."""
    rio, state, engine = await a_worker(tmp_path, redis_server.url)
    coord = state.coordinator
    closed: list[str] = []
    coord.on_ip_release = closed.append
    held = ["10.0.0.1", "10.0.0.2"]
    coord.ips.held = lambda: list(held)  # (leases a crawl would have taken; renewed by each heartbeat)
    try:
        await coord.start()
        coord.next_hb = 0.0
        await coord.tick()  # the renewals are granted: nothing closes
        assert closed == []
        # the fetcher's gate for a request on a new connection: within the leases' deadline only
        assert state.may_send("10.0.0.1")
        clock = coord.clock
        coord.clock = lambda: clock() + 100  # (as for a worker stopped that long)
        assert not state.may_send("10.0.0.1")
        coord.clock = clock
        other = await RedisIO(redis_server.url, CRAWL, partitions=4).connect()
        try:
            await rio.ip_release("10.0.0.2", coord.holder, 0)
            assert (await other.ip_acquire("10.0.0.2", "w2:x", 5)).granted  # another worker's now
        finally:
            await other.close()
        coord.next_hb = 0.0
        await coord.tick()
        assert closed == ["10.0.0.2"]
        held.remove("10.0.0.2")
        coord.leases._renewed_at -= 100  # the heartbeat is long late: the leases may have lapsed
        coord._check_alive()
        assert coord.liveness.suspended and closed == ["10.0.0.2", "10.0.0.1"]
        coord._check_alive()  # once, when the suspension starts
        assert closed == ["10.0.0.2", "10.0.0.1"]
    finally:
        await coord.stop()
        await rio.close()
        state.close(engine.frontier, broken=False)
