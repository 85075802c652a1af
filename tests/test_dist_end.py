"""The end seen at once, and own links consumed locally: ``--workers 2`` at the
default leaseTtl (heartbeats 2 s apart) exits within 1.5 s of the last request
the sim answered, the crawl exact, no page requested twice."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from larbin_py.demo import crawl_rules
from larbin_py.sim import Sim

from helpers.distributed import check_conservation, launched, requested_urls, sim_config, worker_config

pytestmark = pytest.mark.slow


@pytest.mark.async_timeout(120)
async def test_the_launcher_exits_within_a_second_and_a_half_of_the_last_request(tmp_path, redis_server):
    # deep sites: each hop of a site's tree is a link the owner consumes itself
    async with Sim(sim_config(seed=361, hosts=8, pages_per_host=(20, 30), hosts_per_ip=2)) as sim:
        config = worker_config(tmp_path, sim, redis_server.url, "", lease_ttl=10.0, wait_duration=0.02)
        async with launched(tmp_path, config, 2) as proc:
            code = await asyncio.wait_for(proc.wait(), 90)
            ended = time.monotonic()
        log = (tmp_path / "launcher.out").read_text()
        assert code == 0, log[-3000:]
        last = max(r.t for r in sim.log.requests)
        assert ended - last <= 1.5, (round(ended - last, 2), log[-2000:])
        truth = sim.truth(crawl_rules(config, sim.seeds))
        urls = requested_urls(sim)
        assert set(urls) == truth.must_request
        assert [u for u, n in Counter(urls).items() if n > 1] == []  # no page requested twice
        await check_conservation(redis_server.url, config, truth)
