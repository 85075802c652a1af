"""Shared test support.

``async def test_...`` functions run on a fresh uvloop event loop (the loop the
crawler itself runs on), so no pytest-asyncio is needed.  Waiting is always on
events with a timeout; nothing sleeps and hopes.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest
import uvloop


def run_async(coro, timeout: float = 120.0):
    """Run ``coro`` to completion on a new uvloop loop, failing after ``timeout`` s."""

    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(bounded())


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    func = pyfuncitem.obj
    if not inspect.iscoroutinefunction(func):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    marker = pyfuncitem.get_closest_marker("async_timeout")
    timeout = marker.args[0] if marker else 120.0
    run_async(func(**kwargs), timeout)
    return True


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "async_timeout(seconds): bound on an async test's run time"
    )
