"""The zygote (larbin_py.distributed.zygote): workers forked from a process that has
already imported them, supervised as if they had been started with exec.

The unit tests fork this test process as the zygote with a small target in
place of ``larbin_py.cli.main``; the last test runs ``--workers 2`` on the sim
and checks that the workers are the zygote's children and crawl exactly.
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import sys
import threading
import time

import pytest

from larbin_py.distributed.zygote import Zygote

WAIT = 20.0


def target(argv: list[str]) -> int:
    """What a child runs: argv[0] says what to do."""
    what = argv[0]
    if what == "echo":
        print("out:", " ".join(argv[1:]), flush=True)
        print("err:", os.getpid(), file=sys.stderr, flush=True)
        return int(argv[1])
    if what == "burn":  # CPU for the accounting test
        end = time.process_time() + float(argv[1])
        while time.process_time() < end:
            pass
        return 0
    if what == "who":  # its session, name, parent and argv
        with open(f"/proc/{os.getpid()}/comm") as f:
            comm = f.read().strip()
        print(os.getsid(0), os.getpid(), os.getppid(), comm, sys.argv[1:], flush=True)
        return 0
    if what == "wait":  # until a signal ends it
        print("ready", flush=True)
        signal.pause()
        return 0
    if what == "raise":
        raise RuntimeError("boom in the child")
    return 3


@pytest.fixture
def zygote():
    z = Zygote.start(target, preload=(), check_threads=False)
    assert z is not None, "this kernel cannot pidfd_open (Linux 5.3)"
    try:
        yield z
    finally:
        z.close()


async def run(z: Zygote, wid: str, *argv: str) -> tuple[int, str, str]:
    proc = await z.spawn(wid, list(argv))
    out, err, code = await asyncio.wait_for(asyncio.gather(proc.stdout.read(), proc.stderr.read(), proc.wait()), WAIT)
    return code, out.decode(), err.decode()


async def test_a_forked_worker_runs_its_command_line_and_its_exit_code_comes_back(zygote):
    code, out, err = await run(zygote, "w1", "echo", "7", "a b")
    assert code == 7
    assert out == "out: 7 a b\n"
    assert err.startswith("err: ")
    code, out, _ = await run(zygote, "w2", "echo", "0")
    assert code == 0 and out == "out: 0\n"


async def test_an_exception_in_the_child_is_exit_1_with_its_traceback(zygote):
    code, _out, err = await run(zygote, "w1", "raise")
    assert code == 1
    assert "RuntimeError: boom in the child" in err


async def test_the_child_has_its_own_session_its_name_and_the_zygote_as_parent(zygote):
    code, out, _ = await run(zygote, "w3", "who", "--worker-id", "w3")
    assert code == 0
    sid, pid, ppid, comm, argv = out.split(" ", 4)
    assert sid == pid  # a Ctrl-C to the launcher's group does not reach it twice
    assert int(ppid) == zygote.pid
    assert comm == "larbin"  # /proc/<pid>/comm: 'larbin w3'
    assert "'who', '--worker-id', 'w3'" in argv  # sys.argv as the command line would have it
    with open(f"/proc/{zygote.pid}/comm") as f:
        assert f.read().strip() == "larbin zygote"


async def test_signals_reach_the_child_and_a_kill_is_reported_as_asyncio_does(zygote):
    proc = await zygote.spawn("w1", ["wait"])
    assert await asyncio.wait_for(proc.stdout.readline(), WAIT) == b"ready\n"
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), WAIT) == -signal.SIGTERM
    proc = await zygote.spawn("w2", ["wait"])
    assert await asyncio.wait_for(proc.stdout.readline(), WAIT) == b"ready\n"
    proc.kill()
    assert await asyncio.wait_for(proc.wait(), WAIT) == -signal.SIGKILL
    assert proc.returncode == -signal.SIGKILL
    proc.kill()  # an ended process: nothing happens


async def test_the_workers_cpu_reaches_the_launchers_children_rusage():
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    z = Zygote.start(target, preload=(), check_threads=False)
    try:
        code, _out, _err = await run(z, "w1", "burn", "0.3")
        assert code == 0
    finally:
        assert z.close() == 0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert used >= 0.25, used


async def test_children_die_with_the_zygote_and_are_reported_ended():
    z = Zygote.start(target, preload=(), check_threads=False)
    try:
        proc = await z.spawn("w1", ["wait"])
        assert await asyncio.wait_for(proc.stdout.readline(), WAIT) == b"ready\n"
        os.kill(z.pid, signal.SIGKILL)  # the child's PDEATHSIG ends it
        assert await asyncio.wait_for(proc.wait(), WAIT) == -signal.SIGTERM
        with pytest.raises(OSError, match="zygote ended"):
            await z.spawn("w2", ["echo", "0"])
    finally:
        assert z.close() == -signal.SIGKILL


async def test_hanging_up_ends_the_children_still_running_and_the_zygote_waits_for_them():
    z = Zygote.start(target, preload=(), check_threads=False)
    proc = await z.spawn("w1", ["wait"])
    assert await asyncio.wait_for(proc.stdout.readline(), WAIT) == b"ready\n"
    assert await asyncio.to_thread(z.close) == 0
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)  # ended and waited for, not a zombie


def test_no_zygote_beside_a_running_thread():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert Zygote.start(target, preload=()) is None
    finally:
        stop.set()
        t.join()


def process_tree(root: int) -> dict[int, tuple[int, str]]:
    """``{pid: (parent, comm)}`` of the processes under ``root``."""
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            procs[int(name)] = (int(stat.rsplit(")", 1)[1].split()[1]), comm)
    under, todo = {}, [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, comm) in procs.items():
            if ppid == parent:
                under[pid] = (ppid, comm)
                todo.append(pid)
    return under


@pytest.mark.slow
@pytest.mark.async_timeout(120)
async def test_the_launchers_workers_are_forked_from_its_zygote_and_crawl_exactly(tmp_path, redis_server):
    """``python -m larbin_py --workers 2``: two processes named ``larbin w1`` and
    ``larbin w2``, children of ``larbin zygote``, a child of the launcher; exit 0,
    the ground truth requested and indexed once."""
    from larbin_py.demo import crawl_rules
    from larbin_py.sim import Sim

    from helpers.distributed import index_urls, page_requests, launched, sim_config, worker_config

    async with Sim(sim_config(seed=3, hosts=12)) as sim:
        config = worker_config(tmp_path, sim, redis_server.url, "")
        async with launched(tmp_path, config, 2) as proc:
            deadline = time.monotonic() + 30
            tree = {}
            while sorted(c for _p, c in tree.values() if c.startswith("larbin w")) != ["larbin w1", "larbin w2"]:
                assert time.monotonic() < deadline and proc.returncode is None, \
                    f"{tree} {(tmp_path / 'launcher.out').read_text()[-3000:]}"
                tree = process_tree(proc.pid)
                await asyncio.sleep(0.02)
            zygotes = [pid for pid, (ppid, comm) in tree.items() if comm == "larbin zygote" and ppid == proc.pid]
            assert len(zygotes) == 1, tree
            assert all(tree[pid][0] == zygotes[0] for pid in tree if tree[pid][1].startswith("larbin w"))
            code = await asyncio.wait_for(proc.wait(), 90)
        log = (tmp_path / "launcher.out").read_text()
        assert code == 0, log[-3000:]
        assert "worker w1       exit 0" in log and "worker w2       exit 0" in log, log[-3000:]
        truth = sim.truth(crawl_rules(config, sim.seeds))
        requested = [r.url for r in page_requests(sim)]
        assert set(requested) == truth.must_request and len(requested) == len(set(requested))
        assert sorted(index_urls(config.save_dir)) == sorted(truth.saved)
        assert process_tree(proc.pid) == {}  # the zygote and the workers were all waited for


async def test_the_zygote_ignores_sigterm_and_sigint_the_launcher_forwards_them(zygote):
    for sig in (signal.SIGTERM, signal.SIGINT):
        os.kill(zygote.pid, sig)
    code, out, _ = await run(zygote, "w1", "echo", "0")  # still serving
    assert code == 0 and out == "out: 0\n"


async def test_a_signal_the_moment_the_zygote_is_forked_does_not_end_it():
    """The signals are blocked across the fork, so one sent before the zygote
    has set them to ignored is dropped (it once killed the zygote in CI)."""
    for k in range(10):
        z = Zygote.start(target, preload=(), check_threads=False)
        assert z is not None
        try:
            os.kill(z.pid, signal.SIGTERM)
            code, out, _ = await run(z, f"w{k}", "echo", "0")
            assert code == 0 and out == "out: 0\n"
        finally:
            z.close()


async def test_a_child_that_ends_before_its_spawn_returns_is_still_reported(zygote):
    """The zygote's "exit" can be read before spawn() has taken its "started"
    (a child that ends at once): the code is kept for the process that comes."""
    procs = [await zygote.spawn(f"w{k}", ["echo", str(k % 5)]) for k in range(20)]
    codes = await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), WAIT)
    assert codes == [k % 5 for k in range(20)]
