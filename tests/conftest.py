"""Shared test support.

``async def test_...`` functions run on a fresh uvloop event loop (the loop the
crawler itself runs on), so no pytest-asyncio is needed.  Waiting is always on
events with a timeout; nothing sleeps and hopes.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import tempfile
from pathlib import Path

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


def require_service(binary: str, hint: str) -> str:
    """The path of a service's binary; without it a skip, or in CI (CI=true) a failure.

    Services come from Debian packages that .ci/run installs: a missing one
    in CI means the install step broke, and must not hide behind a skip.
    """
    import os
    import shutil

    path = shutil.which(binary) or next(
        (p for p in (f"/usr/bin/{binary}", f"/usr/sbin/{binary}", f"/usr/share/zookeeper/bin/{binary}")
         if os.path.exists(p)), None)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{binary} not installed in CI ({hint})")
        pytest.skip(f"{binary} not installed ({hint}); CI installs it")
    return path


@pytest.fixture
def work_dir():
    """A temp directory Chromium's user may pass through (0711, unlike pytest's tmp_path: the
    browser runs as ``dynamicUser`` when the tests are root; removed after the test)."""
    path = tempfile.mkdtemp(prefix="larbin-browser-")
    os.chmod(path, 0o711)
    try:
        yield Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def redis_server(tmp_path):
    """A private redis-server on a unix socket in a temp dir (AOF on), stopped after the test."""
    from larbin_py.distributed.redis_server import RedisServer

    binary = require_service("redis-server", "apt-get install redis-server")
    server = RedisServer(str(tmp_path / "redis"), binary=binary).start()
    try:
        yield server
    finally:
        server.stop()
