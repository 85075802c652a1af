"""Issue 22: the analysis processes, real ones: an answer, an exception, a
non-zero exit, a hang (killed at the timeout and replaced) and a SIGKILL
from outside (replaced, the try failed as a crash)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import pytest

from larbin_py.analysis.analyzers import parse_analyzer
from larbin_py.analysis.pool import TaskFailed, WorkerPool
from larbin_py.analysis.queue import TaskQueue
from larbin_py.analysis.analyzer_process import format_task, parse_answer

ANALYZERS = '''
import os, time

def ok(page):
    return {"len": len(page.body), "title": page.tree.findtext(".//title")}

def boom(page):
    raise ValueError("boom " + page.url)

def hang(page):
    open(os.environ["HANG_FLAG"], "w").close()
    time.sleep(60)
'''


@pytest.fixture
def analyzers_module(tmp_path, monkeypatch):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "my_analyzers.py").write_text(ANALYZERS)
    (tmp_path / "mods" / "rev.py").write_text("import sys\nopen(sys.argv[2], 'wb').write(open(sys.argv[1], 'rb').read()[::-1])\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "mods") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("HANG_FLAG", str(tmp_path / "hanging"))
    return tmp_path


def setup_for(tmp_path, *lines) -> dict:
    specs = [parse_analyzer(line.split()) for line in lines]
    return {"analyzers": [s.to_json() for s in specs], "spool_dir": str(tmp_path / "queue"),
            "opts": {"analysis_dir": str(tmp_path / "out"), "timeout": 1.0, "max_url_size": 512}}


def message(q: TaskQueue, task) -> bytes:
    return format_task([task.id], [task.analyzer], task.gen, task.offset - task.headers_length, task.headers_length,
                       task.offset, task.length, task.depth, 200, "text/html", "utf-8", task.saved, task.url)


async def run_job(pool: WorkerPool, line: bytes, names=("x",)):
    """One job through the pool's callbacks: its parsed answer, or raises TaskFailed."""
    fut = asyncio.get_running_loop().create_future()
    slot = asyncio.Event()
    pool.on_slot = slot.set
    while not pool.submit(line, None, lambda job, answer: fut.set_result(answer)):
        await asyncio.wait_for(slot.wait(), 30)  # a replacement is starting
        slot.clear()
    answer = await fut
    if isinstance(answer, TaskFailed):
        raise answer
    (result,) = parse_answer(answer, list(names))
    if isinstance(result, tuple):
        raise TaskFailed("error", result[0], result[1])
    return result


async def wait_for_path(path: str, timeout: float = 20.0) -> None:
    async def poll():
        while not os.path.exists(path):
            await asyncio.sleep(0.01)
    await asyncio.wait_for(poll(), timeout)


async def test_answers_errors_exits_hangs_and_kills(analyzers_module):
    tmp = analyzers_module
    setup = setup_for(tmp, "ok python my_analyzers:ok", "boom python my_analyzers:boom",
                      "hang python my_analyzers:hang", f"fails exec {sys.executable} -c raise(SystemExit(7))",
                      f"wc exec {sys.executable} {tmp / 'mods' / 'rev.py'} {{input}} {{output}}")
    q = TaskQueue(str(tmp / "queue"))
    body = b"<html><title>Hi</title></html>"
    tasks = {t.analyzer: t for t in q.add("http://a/", 0, ["ok", "boom", "hang", "fails", "wc"], body)}
    pool = WorkerPool(1, setup, timeout=1.0)
    await pool.start()
    try:
        reply = await run_job(pool, message(q, tasks["ok"]))
        assert reply["records"] == 1
        assert json.loads((tmp / "out" / "ok.jsonl").read_text()) == {"url": "http://a/", "len": len(body),
                                                                       "title": "Hi"}
        with pytest.raises(TaskFailed) as info:
            await run_job(pool, message(q, tasks["boom"]))
        assert info.value.reason == "error" and "ValueError: boom http://a/" in str(info.value)
        assert "my_analyzers.py" in info.value.trace
        with pytest.raises(TaskFailed) as info:
            await run_job(pool, message(q, tasks["fails"]))
        assert info.value.reason == "error" and "exited with status 7" in str(info.value)
        reply = await run_job(pool, message(q, tasks["wc"]))
        out = json.loads((tmp / "out" / "wc.jsonl").read_text())["output"]
        assert open(out, "rb").read() == body[::-1]
        assert [p for p in os.listdir(tmp / "out" / "wc") if p.startswith(".input-")] == []
        first = next(iter(pool.procs))
        with pytest.raises(TaskFailed) as info:
            await run_job(pool, message(q, tasks["hang"]))
        assert info.value.reason == "timeout" and first.returncode is not None
        # a SIGKILL from outside while a task runs: the try fails as a crash
        os.unlink(str(tmp / "hanging"))
        run = asyncio.ensure_future(run_job(pool, message(q, tasks["hang"])))
        await wait_for_path(str(tmp / "hanging"))
        second = next(iter(pool.procs))
        assert second is not first
        os.kill(second.pid, signal.SIGKILL)
        with pytest.raises(TaskFailed) as info:
            await run
        assert info.value.reason == "crash" and "SIGKILL" in str(info.value)
        # the replacement answers
        reply = await run_job(pool, message(q, tasks["ok"]))
        assert reply["records"] == 1
        assert pool.stats()["replaced"] == 2 and pool.timeouts == 1 and pool.crashes == 1
    finally:
        await pool.close()
    assert pool.procs == set()
