"""Flow control end to end: the engine against sim servers with a capacity.

Each loaded server IP (hosting many sites) is a server of ``CAPACITY``
workers (the sim's load model): beyond that many requests in flight it gets
no faster, only slower to answer.  With a fixed cap the crawler keeps ``pagesConnexions`` requests in
flight and the round-trip times balloon; with flow control the measured
in-flight count settles near the servers' capacity.
"""

from __future__ import annotations

import asyncio
import statistics

import pytest

from larbin_py.engine import Engine
from larbin_py.sim import Sim, SimConfig

from helpers.crawl import make_config

pytestmark = pytest.mark.slow

SERVERS = 4
SITES_PER_SERVER = 60
CAPACITY = 4
BASE = 0.05


def loaded_sim() -> Sim:
    ips = [f"127.0.1.{i + 1}" for i in range(SERVERS)]
    return Sim(SimConfig(seed=17, hosts=SERVERS * SITES_PER_SERVER, hosts_per_ip=SITES_PER_SERVER,
                         pages_per_host=(4, 8), dns=True, extras=False, trap=False,
                         robots_mix={"absent": 1.0}, p_redirect=0.0, p_loop=0.0, p_missing=0.0,
                         robots_agent="larbin_py", load={ip: (BASE, 0.0, CAPACITY) for ip in ips}))


async def crawl_sampling(tmp_path, sim: Sim, **changes):
    """Crawl, sampling the servers' total in-flight count every 10 ms."""
    config = make_config(tmp_path, sim, wait_duration=0.0, connexions_per_ip=100,
                         pages_connexions=100, timeout_page=30.0, server_rtt_factor=0.0, **changes)
    engine = Engine(config)
    samples: list[int] = []
    caps: list[int] = []

    async def sample():
        while True:
            samples.append(sum(sim.server.in_flight_ip.values()))
            caps.append(engine.frontier.max_requests)
            await asyncio.sleep(0.01)

    sampler = asyncio.get_running_loop().create_task(sample())
    try:
        summary = await engine.run()
    finally:
        sampler.cancel()
    return engine, summary, samples, caps


def steady(samples: list[int]) -> list[int]:
    """The middle of the crawl: past the ramp-up, before the tail empties."""
    n = len(samples)
    return samples[n // 4: 3 * n // 4] or samples


@pytest.mark.async_timeout(200)
async def test_flow_control_settles_near_the_servers_capacity(tmp_path):
    async with loaded_sim() as sim:
        _e, fixed, fixed_samples, _ = await crawl_sampling(tmp_path / "fixed", sim, flow_control=False)
    async with loaded_sim() as sim:
        engine, adaptive, samples, caps = await crawl_sampling(
            tmp_path / "flow", sim, flow_control=True, min_connexions=2, rtt_min=1.5 * BASE,
            rtt_max=4 * BASE, rtt_interval=1.0)
    assert fixed.pages == adaptive.pages > 1000
    capacity = SERVERS * CAPACITY
    fixed_load = statistics.mean(steady(fixed_samples))
    flow_load = statistics.mean(steady(samples))
    # the fixed cap keeps far more than the capacity in flight...
    assert fixed_load > 3 * capacity, fixed_load
    # ...flow control settles near it (within a factor of two), and well under the fixed load
    assert capacity / 2 <= flow_load <= 2 * capacity, (flow_load, capacity)
    assert engine.flow.decreases > 0 and engine.flow.increases > 0
    assert min(caps) >= 2 and max(caps) <= 100
    # every answer fed the controller, robots.txt ones included: the cap rose
    # during the robots.txt phase that opens the crawl
    assert engine.flow.samples == engine.counts.requests
    robots_phase = caps[: len(caps) // 10]
    assert max(robots_phase) > 2 * min(robots_phase)
