"""The loop's clock step (larbin_py.loopclock) and the engine's timer, which uses it."""

from __future__ import annotations

import asyncio
import random

import pytest
import uvloop

from larbin_py.engine import Engine
from larbin_py.loopclock import MILLISECOND, clock_step
from larbin_py.sim import Sim, SimConfig
from helpers.crawl import make_config


def test_the_step_is_the_loops_resolution_or_a_millisecond():
    loop = asyncio.new_event_loop()
    try:
        assert clock_step(loop) == loop._clock_resolution < 1e-6
    finally:
        loop.close()
    loop = uvloop.new_event_loop()
    try:
        assert clock_step(loop) == MILLISECOND
    finally:
        loop.close()


async def _early_wakeups(step: float, waits: int = 200) -> int:
    """Timers armed for t + step whose callback saw loop.time() < t."""
    loop = asyncio.get_running_loop()
    rng = random.Random(7)
    early = 0
    for _ in range(waits):
        t = loop.time() + rng.uniform(0.0005, 0.003)
        f = loop.create_future()
        loop.call_at(t + step, f.set_result, None)
        await f
        early += loop.time() < t
    return early


async def test_a_uvloop_timer_armed_one_step_late_never_fires_before_its_time():
    loop = asyncio.get_running_loop()
    assert await _early_wakeups(0.0) > 0  # the mechanism: on time, it fires early
    assert await _early_wakeups(clock_step(loop)) == 0


@pytest.mark.async_timeout(60)
async def test_the_engine_wakes_about_once_per_wait_not_once_per_loop_turn(tmp_path):
    """A crawl paced by waitDuration (13 ms: deadlines between milliseconds) wakes its
    pump on a timer about once per request; a pump that found its timer early and
    re-armed it would wake dozens of times per wait."""
    async with Sim(SimConfig(hosts=2, seed=5, pages_per_host=(12, 16), dns=True, cross_host_ratio=0.0,
                              robots_mix={"absent": 1})) as sim:
        config = make_config(tmp_path, sim, wait_duration=0.013)
        wakeups = 0

        def counted(engine):
            on_timer = engine._on_timer

            def wrapped():
                nonlocal wakeups
                wakeups += 1
                on_timer()
            engine._on_timer = wrapped
            return engine

        engine = counted(Engine(config))
        summary = await engine.run()
        requests = engine.counts.requests
        assert summary.pages >= 20 and requests >= summary.pages
        assert wakeups <= 2 * requests + 10, (wakeups, requests)
