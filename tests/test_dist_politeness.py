"""Politeness exact across workers, from the sim's request log: two request
starts to one host name or one IP at least waitDuration apart (less the
log's measurement slack, helpers.crawl.SLACK) whoever sends them, while
partitions change hands (a worker joins mid-crawl, one is killed and
started again) and while IP leases change hands all the time (an
ipLeaseHold far below waitDuration, so a lease is let go as soon as
another worker asks, often before its holder sent anything on it)."""

from __future__ import annotations

import signal

import pytest

from larbin_py.demo import crawl_rules
from larbin_py.distributed.redisio import RedisIO
from larbin_py.sim import Sim

from helpers.crawl import SLACK
from helpers.distributed import (CRAWL, Workers, check_conservation, crawl_under_way, requested_urls, sim_config)

pytestmark = pytest.mark.slow


def too_close(sim, wait: float) -> list:
    """Requests to one host or IP closer than ``wait`` (less the slack), named for the failure."""
    return [(label, key, round(b.t - a.t, 4), a.target, b.target, a.client_port, b.client_port)
            for label, key, a, b in sim.log.too_close(wait - SLACK)]


async def finish(workers: Workers, sim, redis_url: str, wait: float) -> None:
    codes = await workers.wait(120)
    assert all(c == 0 for c in codes.values()), {w: workers.log(w)[-2000:] for w in codes}
    close = too_close(sim, wait)
    assert not close, close[:5]
    config = workers.configs[workers.names[0]]
    truth = sim.truth(crawl_rules(config, sim.seeds))
    assert set(requested_urls(sim)) == truth.must_request
    await check_conservation(redis_url, config, truth)


@pytest.mark.async_timeout(180)
async def test_politeness_holds_while_a_worker_joins_and_one_is_killed_and_started_again(tmp_path, redis_server):
    wait = 0.05
    async with Sim(sim_config(seed=36, hosts=24, pages_per_host=(8, 14), hosts_per_ip=4)) as sim:
        workers = Workers(tmp_path, sim, redis_server.url, 3, wait_duration=wait, lease_ttl=1.0,
                          ip_lease_hold=0.2)
        await workers.start("w0")
        await workers.start("w1")
        io = await RedisIO(redis_server.url, CRAWL, partitions=64).connect()
        try:
            await crawl_under_way(io, pages=30)
            await workers.start("w2")  # a join: partitions move to it, drained by the others
            await crawl_under_way(io, pages=80)
            workers.procs["w1"].send_signal(signal.SIGKILL)  # its leases lapse: taken over
            await workers.procs["w1"].wait()
            await crawl_under_way(io, pages=110)
        finally:
            await io.close()
        await workers.start("w1", reload=True)  # as the launcher's respawn
        await finish(workers, sim, redis_server.url, wait)


@pytest.mark.async_timeout(180)
async def test_politeness_holds_while_ip_leases_change_hands_before_their_holder_sends_anything(
        tmp_path, redis_server):
    # four workers all wanting one IP: a lease is granted, then given up at once to the next
    # waiter, its holder having sent nothing (before the fix: gaps of 0.19-0.28 s on the IP)
    wait = 0.3
    async with Sim(sim_config(seed=38, hosts=8, pages_per_host=(2, 4), hosts_per_ip=8)) as sim:
        workers = Workers(tmp_path, sim, redis_server.url, 4, wait_duration=wait, lease_ttl=1.0,
                          ip_lease_hold=0.01)
        await workers.start_all()
        await finish(workers, sim, redis_server.url, wait)
