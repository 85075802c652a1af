"""``exec`` analyzers, real commands: output kept to a bound (100 MB printed, 64 KiB
kept, the rest counted), the command in a process group of its own, killed whole at
the page's deadline (a grandchild that holds stdout cannot hold the read, nor
survive), and the pool's own kill of a stopped analysis process takes the groups
of its commands with it; through ``analyze``, such a try fails and is retried,
then alerted."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

import pytest

from larbin_py.analysis.alerts import ALERTS_LOG
from larbin_py.analysis.analyzers import AnalyzerTimeout, PageView, parse_analyzer, run
from larbin_py.analysis.command import CAPTURE_LIMIT, Tail, run_command
from larbin_py.analysis.pool import TaskFailed, WorkerPool
from larbin_py.analysis.queue import TaskQueue
from larbin_py.cli import main
from test_analysis_cli import saved_crawl
from test_analysis_pool import message, run_job, setup_for, wait_for_path

MB = 1 << 20

#: Prints ``argv[1]`` MiB on stdout, a word on stderr, and exits with ``argv[2]``.
LOUD = "import sys\nb = b'x' * (1 << 20)\nfor _ in range(int(sys.argv[1])):\n    sys.stdout.buffer.write(b)\n" \
       "sys.stdout.flush()\nsys.stderr.write('done')\nsys.exit(int(sys.argv[2]))\n"

#: Starts ``sleep 1000`` (which inherits stdout and stderr), writes "pid pgid grandchild"
#: to ``argv[1]``, then exits (``exit``) or sleeps too (``hang``).
FORKS = "import os, subprocess, sys, time\nchild = subprocess.Popen(['sleep', '1000'])\n" \
        "with open(sys.argv[1], 'a') as f:\n    f.write(f'{os.getpid()} {os.getpgrp()} {child.pid}\\n')\n" \
        "if sys.argv[2] == 'hang':\n    time.sleep(1000)\n"


def state(pid: int) -> str | None:
    """The process's state letter from /proc (None: gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    return stat[stat.rfind(b")") + 2:].split()[0].decode()


def alive(pid: int) -> bool:
    """Running or sleeping: not gone, not a zombie waiting for its reaper."""
    return state(pid) not in (None, "Z", "X")


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2:].split()
            if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                found.append(int(name))
    return found


async def until_dead(pids, timeout: float = 5.0) -> list[int]:
    """Wait (polling /proc) until none of ``pids`` is alive; the ones still alive then."""
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)  # SIGKILL is delivered asynchronously: wait for its effect
    return [p for p in pids if alive(p)]


def read_pids(path) -> list[tuple[int, int, int]]:
    with open(path) as f:
        return [tuple(map(int, line.split())) for line in f.read().splitlines()]


def cleanup(path) -> None:
    """Kill what a failing test left running (the old code leaves these behind)."""
    if os.path.exists(path):
        for pids in read_pids(path):
            for pid in pids[::2]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


@pytest.fixture
def scripts(tmp_path):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "loud.py").write_text(LOUD)
    (tmp_path / "mods" / "forks.py").write_text(FORKS)
    return tmp_path


def test_tail_keeps_the_last_bytes_and_counts_the_rest():
    tail = Tail(8)
    tail.feed(b"abc")
    assert (bytes(tail.data), tail.dropped, tail.total) == (b"abc", 0, 3)
    tail.feed(b"defgh")
    assert (bytes(tail.data), tail.dropped) == (b"abcdefgh", 0)
    tail.feed(b"ij")
    assert (bytes(tail.data), tail.dropped) == (b"cdefghij", 2)
    tail.feed(b"0123456789ABC")  # one chunk past the bound on its own
    assert (bytes(tail.data), tail.dropped, tail.total) == (b"56789ABC", 15, 23)


def test_run_command_keeps_the_bound_of_100_mb_and_counts_what_it_dropped(scripts):
    started = time.monotonic()
    result = run_command([sys.executable, str(scripts / "mods" / "loud.py"), "100", "3"], 60)
    assert not result.timed_out and result.returncode == 3
    assert len(result.stdout.data) == CAPTURE_LIMIT and bytes(result.stdout.data) == b"x" * CAPTURE_LIMIT
    assert result.stdout.dropped == 100 * MB - CAPTURE_LIMIT and result.stdout.total == 100 * MB
    assert bytes(result.stderr.data) == b"done" and result.stderr.dropped == 0
    print(f"\n100 MB through run_command: {time.monotonic() - started:.2f} s")


async def test_an_exec_analyzer_printing_100_mb_costs_its_process_the_bound_not_the_output(scripts):
    tmp = scripts
    loud = f"{sys.executable} {tmp / 'mods' / 'loud.py'}"
    setup = setup_for(tmp, f"loud exec {loud} 100 0", f"fails exec {loud} 100 1")
    setup["opts"]["timeout"] = 60.0
    q = TaskQueue(str(tmp / "queue"))
    tasks = {t.analyzer: t for t in q.add("http://a/", 0, ["loud", "fails"], b"<html></html>")}
    pool = WorkerPool(1, setup, timeout=60.0)
    await pool.start()
    try:
        reply = await run_job(pool, message(q, tasks["loud"]))
        with pytest.raises(TaskFailed) as info:
            await run_job(pool, message(q, tasks["fails"]))
    finally:
        await pool.close()
    # the analysis process's peak RSS: its own (about 25 MB), not the 100 MB a command's
    # output costs when kept whole (twice that once joined)
    print(f"\nanalysis process peak RSS after 2 x 100 MB of output: {pool.peak_rss_kb / 1024:.1f} MB")
    assert 0 < pool.peak_rss_kb < 80 * 1024
    assert reply["records"] == 1
    record = json.loads((tmp / "out" / "loud.jsonl").read_text())
    assert record["dropped"] == {"stdout": 100 * MB - CAPTURE_LIMIT, "stderr": 0}
    assert "exited with status 1; stdout: 'xxx" in str(info.value)
    assert f"(the last 500 of {100 * MB} bytes); stderr: 'done'" in str(info.value)


@pytest.mark.parametrize("command", ["exit", "hang"])
async def test_a_grandchild_holding_stdout_is_killed_with_the_group_at_the_timeout(scripts, command):
    """The command exits at once (or hangs too) and its grandchild sleeps with stdout
    open: the read ends at the page's deadline (0.9 x analysisTimeout), the whole
    group is killed, and the analysis process itself goes on (no pool timeout)."""
    tmp = scripts
    pids = tmp / "pids"
    setup = setup_for(tmp, f"forks exec {sys.executable} {tmp / 'mods' / 'forks.py'} {pids} {command}")
    q = TaskQueue(str(tmp / "queue"))
    (task,) = q.add("http://a/", 0, ["forks"], b"<html></html>")
    pool = WorkerPool(1, setup, timeout=1.0)
    await pool.start()
    first = next(iter(pool.procs))
    try:
        started = time.monotonic()
        with pytest.raises(TaskFailed) as info:
            await run_job(pool, message(q, task))
        took = time.monotonic() - started
        ((pid, pgid, grandchild),) = read_pids(pids)
        assert await until_dead([pid, grandchild]) == []
        assert pgid == pid != os.getpgrp()  # a group of its own, led by the command
        assert group_members(pgid) == []
        assert info.value.reason == "error"
        assert f"AnalyzerTimeout: {sys.executable} still running after 0.9 s" in str(info.value)
        assert "the group was killed" in str(info.value)
        assert 0.85 < took < 1.0  # the page's deadline, before the pool's
        assert pool.timeouts == 0 and next(iter(pool.procs)) is first and first.returncode is None
    finally:
        await pool.close()
        cleanup(pids)


async def test_the_pool_killing_a_stopped_analysis_process_kills_its_commands_groups(scripts):
    """The analysis process cannot enforce the deadline (SIGSTOPped here; a page's
    earlier analyzers can also eat the pool's margin): the pool's timeout kills it,
    and with it the group of the command it was running."""
    tmp = scripts
    pids = tmp / "pids"
    setup = setup_for(tmp, f"forks exec {sys.executable} {tmp / 'mods' / 'forks.py'} {pids} hang")
    q = TaskQueue(str(tmp / "queue"))
    (task,) = q.add("http://a/", 0, ["forks"], b"<html></html>")
    pool = WorkerPool(1, setup, timeout=2.0)
    await pool.start()
    try:
        run = asyncio.ensure_future(run_job(pool, message(q, task)))
        await wait_for_path(str(pids))
        while not read_pids(pids):  # the line is written after the file is created
            await asyncio.sleep(0.01)
        os.kill(next(iter(pool.procs)).pid, signal.SIGSTOP)
        with pytest.raises(TaskFailed) as info:
            await run
        ((pid, pgid, grandchild),) = read_pids(pids)
        assert await until_dead([pid, grandchild]) == []
        assert group_members(pgid) == []
        assert info.value.reason == "timeout" and pool.timeouts == 1
        deadline = time.monotonic() + 30
        while not pool.procs:  # the replacement ready before close (a start cut short is noise)
            assert time.monotonic() < deadline, "no replacement process"
            await asyncio.sleep(0.01)
    finally:
        await pool.close()
        cleanup(pids)


def test_an_exec_analyzer_left_no_time_by_the_pages_others_is_not_started(scripts):
    pids = scripts / "pids"
    spec = parse_analyzer(["forks", "exec", sys.executable, str(scripts / "mods" / "forks.py"), str(pids), "exit"])
    page = PageView("http://a/", 200, "text/html", None, b"<html></html>", 0)
    opts = {"analysis_dir": str(scripts / "out"), "timeout": 1.0}
    with pytest.raises(AnalyzerTimeout, match=r"^\S+ not started: the page's other analyzers used its time"):
        run(spec, page, opts, deadline=time.monotonic() - 0.01)
    assert not pids.exists() and os.listdir(scripts / "out" / "forks") == []  # nothing run, no input left


def test_analyze_fails_a_hung_command_as_a_timeout_retries_it_then_alerts(tmp_path, capsys):
    """Through ``analyze``: each try's group is killed at the deadline, the try fails,
    is tried again after the backoff, and the last failure raises the alert."""
    (tmp_path / "forks.py").write_text(FORKS)
    pids = tmp_path / "pids"
    config, conf = saved_crawl(tmp_path, "mirror", analysis_timeout=1.0, analyzers=(
        ("forks", r"urls=/p0$", "exec", sys.executable, str(tmp_path / "forks.py"), str(pids), "exit"),))
    try:
        started = time.monotonic()
        assert main(["analyze", "-c", conf, "--workers", "1"]) == 1
        took = time.monotonic() - started
        tries = read_pids(pids)
        assert len(tries) == 2  # the first try and its retry
        left = asyncio.run(until_dead([p for pid, _, child in tries for p in (pid, child)]))
        assert left == []
        assert all(group_members(pgid) == [] for _, pgid, _ in tries)
        alerts = [json.loads(line) for line in open(tmp_path / "state" / ALERTS_LOG)]
        assert [(a["url"], a["tries"], a["analyzer"]) for a in alerts] == [("http://h0.test/p0", 2, "forks")]
        assert "AnalyzerTimeout" in alerts[0]["error"] and "the group was killed" in alerts[0]["error"]
        assert took < 20
        assert "0 tasks done, 1 failed" in capsys.readouterr().err
    finally:
        cleanup(pids)
