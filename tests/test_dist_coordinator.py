"""The coordinator's own bookkeeping against a real redis-server: one worker's
DistState and Engine built as ``run_worker`` builds them, ticks driven by
the test (no crawl runs).

* robots.txt answers leave ``robots:{p}`` once expired: those found expired
  at a takeover, and those this worker holds when their day is over.
"""

from __future__ import annotations

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
        assert p in coord.held and coord.robots_loaded == 1
        assert await r.hkeys(key) == [b"http://other.test/robots.txt"]
        wall[0] += 6  # the other's day is over too
        coord.next_hb = 0.0
        await coord.tick()
        assert await r.exists(key) == 0 and coord.robots_pruned == 2
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
