"""The coordinator's reaction to the IP lease notes, on a real redis-server.

Two coordinators in one process (each with a real Frontier, sink and inbox,
and its own RedisIO, as two workers): a worker denied an IP asks again as
soon as the holder lets go (the release note ``F<ip>``), not at its next
heartbeat; a holder with nothing ready on an IP lets go as soon as another
worker is denied it (the note ``W<ip>``), not when its idle delay or its next
tick comes.  The last request time travels with the lease: the new holder
waits the delay from the old holder's last start.  The heartbeats here are
6 s apart (leaseTtl 30) and every handover is waited for with a 3 s
deadline, so a handover that waited for a heartbeat fails the test.
"""

from __future__ import annotations

import asyncio
import random
import time

from larbin_py.dist.coordinator import Coordinator
from larbin_py.dist.inbox import RedisInbox
from larbin_py.dist.keys import Keys
from larbin_py.dist.redisio import CrawlMeta, RedisIO
from larbin_py.dist.sink import RedisSink
from larbin_py.frontier.fakes import memory_stores
from larbin_py.frontier.scheduler import Frontier
from larbin_py.frontier.sites import LeaseState

import redis.asyncio as aredis

META = CrawlMeta(8, 16, {"waitDuration": "0", "depth": "5"})
LEASE_TTL = 30.0  # heartbeats every 6 s
DEADLINE = 3.0  # a handover well before the next heartbeat
IP = "10.0.0.9"


async def wait_until(pred, timeout=DEADLINE, what="condition"):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout} s"
        await asyncio.sleep(0.005)


class Worker:
    """One worker's frontier and coordinator (no engine: the test starts and ends requests)."""

    def __init__(self, io: RedisIO, name: str, wait: float) -> None:
        self.fr = Frontier(ram_urls=1000, max_urls_by_site=40, max_requests=50, wait_duration=wait,
                           rng=random.Random(1), agent="larbin", stores=memory_stores(),
                           ip_leases=True, ip_lease_hold=10.0, obey_robots=False)
        self.sink = RedisSink(io.partitions)
        self.co = Coordinator(io, self.fr, self.sink, RedisInbox(100), worker=name, lease_ttl=LEASE_TTL,
                              wait_duration=wait, clock=time.monotonic)
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.co.start()
        self.task = asyncio.ensure_future(self.co.run())
        await wait_until(lambda: self.co.notes_up, what="notes subscribed")

    def want(self, url: str) -> None:
        """A ready URL on IP (its lease becomes WANTED; the coordinator is woken)."""
        fr = self.fr
        fr.push(url, 3, 0)
        now = time.monotonic()
        fr.load(now)
        for site in fr.take_dns_requests():
            fr.dns_resolved(site, (IP,), 300.0, now)

    def lease(self):
        ip = self.fr.ips.get(IP)
        return ip.lease if ip is not None else None

    async def stop(self) -> None:
        await self.co.stop()
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass


async def _connect(server) -> RedisIO:
    io = await RedisIO(server.url, "t").connect()
    await io.join_crawl(META)
    return io


async def test_a_denied_worker_asks_again_when_the_holder_releases(redis_server):
    io, other = await _connect(redis_server), await _connect(redis_server)
    assert (await other.ip_acquire(IP, "elsewhere:1", 30)).granted
    b = Worker(io, "wb", wait=0.0)
    await b.start()
    b.want("http://b.test/1")
    raw = aredis.Redis(unix_socket_path=redis_server.socket_path)

    def denied():
        ip = b.fr.ips.get(IP)
        return ip is not None and ip.lease is LeaseState.WANTED and time.monotonic() < ip.lease_retry < 1e300
    await wait_until(denied, what="denied")
    assert await raw.zscore(Keys("t").ipwant(IP), b.co.holder) is not None  # recorded as a waiter
    retry_at = b.fr.ips[IP].lease_retry
    assert retry_at >= b.co.next_hb - 0.01  # without the note: the next heartbeat, seconds away
    released = time.monotonic()
    assert await other.ip_release(IP, "elsewhere:1", int(time.time() * 1000), b"{}")
    await wait_until(lambda: b.lease() is LeaseState.HELD, what="granted after the release note")
    assert time.monotonic() < retry_at  # before the heartbeat would have asked
    assert b.co.notes_heard >= 1 and time.monotonic() - released < DEADLINE
    await b.stop()
    await raw.aclose()
    await io.close(), await other.close()


async def test_a_holder_with_nothing_ready_lets_a_wanted_ip_go_at_once(redis_server):
    wait = 2.0  # idle release 4 s after the last start: a prompt handover is the note's doing
    ia, ib = await _connect(redis_server), await _connect(redis_server)
    a, b = Worker(ia, "wa", wait), Worker(ib, "wb", wait)
    await a.start()
    await b.start()
    a.want("http://a.test/1")
    await wait_until(lambda: a.lease() is LeaseState.HELD, what="a granted")
    req = a.fr.next_request(time.monotonic())
    assert req is not None
    a_start = req.started
    a.fr.fetched_ok(req, time.monotonic())  # nothing more ready on the IP at a
    assert a.fr.ips[IP].lease is LeaseState.HELD and not a.fr.ips[IP].ready
    b.want("http://b.test/1")
    await wait_until(lambda: b.lease() is LeaseState.HELD, what="b granted after a let go")
    assert a.lease() is not LeaseState.HELD and a.fr.ip_leases_held() == []
    assert time.monotonic() < a_start + 2 * wait  # not a's idle release
    # Politeness travels with the lease: b starts nothing before a's last start + the delay.
    assert b.fr.ips[IP].next_allowed >= a_start + wait - 0.01
    assert b.fr.next_request(time.monotonic()) is None
    await a.stop(), await b.stop()
    await ia.close(), await ib.close()
