"""The test harness itself: the loop tests run on, and the checks the end-to-end tests use."""

import asyncio
from types import SimpleNamespace

import pytest
import uvloop

from larbin_py.sim.log import Connection, Request, RequestLog
from helpers.crawl import check_politeness
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


def test_a_politeness_failure_names_the_requests_around_its_gap():
    """The gap's two requests, then every request to that IP two seconds either side and the
    connections they came on: a failure seen once in CI leaves what happened around it."""
    log = RequestLog()
    log.open(Connection(9, "127.0.1.3", 51870, 0.0))
    log.open(Connection(12, "127.0.1.3", 51900, 1.5, 3.0))
    for t, conn, target, status in [(0.2, 9, "/a", 200), (1.0, 9, "/loop/b30", 302), (1.219, 9, "/moved/r8.html", 200),
                                    (2.0, 12, "/later", 404), (9.0, 12, "/far", 200)]:
        log.add(Request(t, t, conn, 51870 if conn == 9 else 51900, "127.0.1.3", 80, "h2.sim.test", "h2.sim.test",
                        "GET", target, status))
    with pytest.raises(AssertionError) as failed:
        check_politeness(SimpleNamespace(log=log), 0.35, connections=False)
    text = str(failed.value)
    assert "host h2.sim.test: 0.219 s between [t 1.000 conn 9 port 51870 /loop/b30" in text
    around = text.split("around the first gap:")[1]
    assert "+0.000 conn 9 port 51870 h2.sim.test/loop/b30 -> 302" in around
    assert "+0.219 conn 9 port 51870 h2.sim.test/moved/r8.html -> 200" in around
    assert "/a -> 200" in around and "/later -> 404" in around and "/far" not in around  # 7.8 s away
    assert "conn 9 port 51870 opened 0.000 closed -" in around
    assert "conn 12 port 51900 opened 1.500 closed 3.000" in around
