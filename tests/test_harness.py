"""The test harness itself: the loop tests run on, and the checks the end-to-end tests use."""

import asyncio
from types import SimpleNamespace

import pytest
import uvloop

from larbin_py.sim.log import Connection, RequestLog
from helpers.distributed import check_politeness_across_stops


async def test_async_tests_run_on_uvloop():
    loop = asyncio.get_running_loop()
    assert isinstance(loop, uvloop.Loop)
    fut = loop.create_future()
    loop.call_soon(fut.set_result, 42)
    assert await asyncio.wait_for(fut, 1) == 42


def test_the_politeness_check_across_stops_excuses_only_a_stopped_worker_s_own_connection():
    """check_politeness_across_stops: the newer connection must come during the stop, the
    older one close within STOP_GRACE of the worker running again; anything else fails."""
    def sim_with(*spans):
        log = RequestLog()
        for i, (opened, closed) in enumerate(spans):
            log.open(Connection(i, "10.0.0.1", 40000 + i, opened, closed))
        return SimpleNamespace(log=log)

    stops = [(1.0, 5.0)]
    check_politeness_across_stops(sim_with((0.0, 5.5), (3.0, 8.0)), 0.1, stops)  # the stopped one's
    with pytest.raises(AssertionError):
        check_politeness_across_stops(sim_with((0.0, 5.5), (0.5, 8.0)), 0.1, stops)  # both before the stop
    with pytest.raises(AssertionError):
        check_politeness_across_stops(sim_with((0.0, 7.0), (3.0, 8.0)), 0.1, stops)  # kept past its waking
    with pytest.raises(AssertionError):
        check_politeness_across_stops(sim_with((0.0, 5.5), (3.0, 8.0)), 0.1, [])  # no stop at all
