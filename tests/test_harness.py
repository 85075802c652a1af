import asyncio

import uvloop


async def test_async_tests_run_on_uvloop():
    loop = asyncio.get_running_loop()
    assert isinstance(loop, uvloop.Loop)
    fut = loop.create_future()
    loop.call_soon(fut.set_result, 42)
    assert await asyncio.wait_for(fut, 1) == 42
