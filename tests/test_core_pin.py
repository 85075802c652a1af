"""cpuAffinity auto: the loop and the writer thread on one core (larbin_py.core_policy, larbin_py.core_pin).

The policy's table without a clock; then the real calls: a pinned pair whose
core another program takes is freed and pinned again after its rest, what
the loop starts (processes, pool threads) keeps every core, and a real crawl
with the key on: its loop and writer on one core, its analysis process on all
of them, the web covered.
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from larbin_py.config import format_config
from larbin_py.core_pin import CorePin, available, release_thread, spawning
from larbin_py.core_policy import CORE_TRANSITIONS, FREE, PIN, CorePolicy
from larbin_py.demo import crawl_rules
from larbin_py.sim import Sim

from helpers.crawl import make_config
from helpers.distributed import requested_urls, sim_config, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPUS = frozenset(os.sched_getaffinity(0))


# ---------------------------------------------------------------- the policy


def test_the_policy_frees_a_busy_pair_rests_it_doubling_and_calms_down():
    p = CorePolicy(window=2.0, busy=0.35, rest=10.0, max_rest=40.0, calm=60.0)
    p.start(0.0, 5.0)
    assert p.observe(1.0, 5.9) is None  # half a window: not judged yet
    assert p.observe(2.0, 5.6) is None and p.state == "pinned"  # waited 0.6 s of 2: 30 %
    assert p.observe(4.0, 6.4) == FREE and p.state == "free"  # 0.8 s of 2: 40 %
    assert p.releases == 1 and p.free_until == 14.0 and p.next_rest == 20.0
    assert p.observe(13.9, 9.0) is None and p.state == "free"  # resting, whatever the delay
    assert p.observe(14.0, 9.0) == PIN and p.state == "pinned"
    assert p.observe(16.0, 10.0) == FREE and p.free_until == 36.0  # 50 %: freed again, rest doubled
    assert p.observe(36.0, 10.0) == PIN
    assert p.observe(38.0, 11.0) == FREE and p.free_until == 78.0 and p.next_rest == 40.0  # at most max_rest
    assert p.observe(78.0, 11.0) == PIN
    for t in range(80, 140, 2):  # a minute pinned, calm: the rest back at its start
        assert p.observe(float(t), 11.0) is None
    assert p.observe(140.0, 11.1) is None and p.next_rest == 10.0 and p.releases == 3


def test_the_policy_judges_a_window_from_its_start_and_never_a_negative_delay():
    p = CorePolicy(window=1.0, busy=0.5)
    p.start(10.0, 2.0)
    assert p.observe(10.5, 3.0) is None  # 1 s waited in half a window: not judged before its end
    assert p.observe(11.0, 2.4) is None and p.last_share == pytest.approx(0.4)
    assert p.observe(12.0, 1.0) is None and p.last_share == 0.0  # a counter that went back (a new thread)


def test_the_policy_changes_state_only_by_its_table():
    assert set(CORE_TRANSITIONS.values()) == {"pinned", "free"}
    assert {s for s, _e in CORE_TRANSITIONS} == {"pinned", "free"}
    assert CORE_TRANSITIONS[("pinned", "busy")] == "free" and CORE_TRANSITIONS[("free", "rested")] == "pinned"


# ---------------------------------------------------------------- the edge, with real calls


def _mask(tid: int) -> frozenset[int]:
    return frozenset(os.sched_getaffinity(tid))


def _task_mask(pid: int, tid: int) -> frozenset[int]:
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return _cpu_list(line.split(":", 1)[1].strip())
    raise AssertionError(f"no Cpus_allowed_list for {pid}/{tid}")


def _cpu_list(text: str) -> frozenset[int]:
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


class _Pair:
    """This thread (pytest's, standing in for the loop), a thread standing in for the writer,
    and the pins a test makes on them (:func:`pair` undoes them all)."""

    def __init__(self) -> None:
        self.me = threading.get_native_id()
        self._stop = threading.Event()
        self.writer = threading.Thread(target=self._stop.wait, daemon=True)
        self.writer.start()
        self.tid = self.writer.native_id
        self.pins: list[CorePin] = []

    def pin(self, policy: CorePolicy | None = None) -> CorePin:
        pin = CorePin(policy, err=io.StringIO())
        self.pins.append(pin)
        return pin

    def start(self, pin: CorePin) -> bool:
        return pin.start(asyncio.get_running_loop(), self.tid)

    def masks(self) -> tuple[frozenset[int], frozenset[int]]:
        return _mask(self.me), _mask(self.tid)

    def one_cpu(self, pin: CorePin) -> bool:
        """On a machine (or a CPU set) of one CPU there is nothing to pin: said, and True."""
        if len(CPUS) > 1:
            return False
        assert self.start(pin) is False
        assert "not pinned: the process may use one CPU only" in pin.err.getvalue()
        return True

    def close(self) -> None:
        for pin in self.pins:
            pin.stop()
        os.sched_setaffinity(0, CPUS)  # (this thread is pytest's: never left pinned)
        self._stop.set()
        self.writer.join()


@pytest.fixture
def pair():
    p = _Pair()
    try:
        yield p
    finally:
        p.close()


async def test_a_pinned_pair_whose_core_another_program_takes_is_freed_then_pinned_again(pair):
    assert available() is None  # Linux with schedstat: what CI runs on
    pin = pair.pin(CorePolicy(window=0.3, busy=0.35, rest=0.6, max_rest=0.6))
    if pair.one_cpu(pin):
        return
    assert pair.start(pin)
    core = pin.cpu
    assert pair.masks() == ({core}, {core})
    # another program wants that core all the time, and the loop has work: it waits for it
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {core})

        async def busy_until_freed():
            end = time.monotonic() + 0.02
            while time.monotonic() < end:  # the loop's own work, 20 ms a turn
                pass
            return pin.cpu is None

        await wait_for(busy_until_freed, 20, "the pair was never freed from a taken core", step=0)
    finally:
        hog.kill()
        hog.wait()
    assert pair.masks() == (CPUS, CPUS)
    assert f"core {core} is shared (the loop waited for it" in pin.err.getvalue()
    assert pin.policy.releases == 1
    # after its rest the pair is pinned again, to the core the loop is on then
    await wait_for(lambda: pin.cpu is not None, 20, "the pair was not pinned again after its rest")
    assert pair.masks() == ({pin.cpu}, {pin.cpu})
    pin.stop()
    assert pair.masks() == (CPUS, CPUS) and pin.cpu is None


async def test_what_a_pinned_loop_starts_keeps_every_core(pair):
    """A process started from the loop (the analysis processes, Chromium, an alert
    command) takes the thread's CPU set, and so does a thread: spawning() and
    release_thread() give them the process's set back."""
    pin = pair.pin()
    show = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
    if pair.one_cpu(pin):
        return
    assert pair.start(pin)
    core = pin.cpu
    proc = await asyncio.create_subprocess_exec(*show, stdout=subprocess.PIPE)
    pinned_child = (await proc.communicate())[0].decode()
    with spawning():
        proc = await asyncio.create_subprocess_exec(*show, stdout=subprocess.PIPE)
    free_child = (await proc.communicate())[0].decode()
    assert pinned_child.strip() == str([core]) and free_child.strip() == str(sorted(CPUS))
    assert _mask(pair.me) == {core}  # pinned again once started
    with ThreadPoolExecutor(1) as plain, ThreadPoolExecutor(1, initializer=release_thread) as pool:
        assert plain.submit(os.sched_getaffinity, 0).result() == {core}
        assert pool.submit(os.sched_getaffinity, 0).result() == CPUS
    pin.stop()
    assert _mask(pair.me) == CPUS
    with spawning():  # nothing pinned: nothing done
        assert _mask(pair.me) == CPUS


@pytest.mark.async_timeout(120)
async def test_a_crawl_with_cpu_affinity_auto_pins_its_loop_and_writer_and_nothing_else(tmp_path):
    """A real crawl (mirror output, one analysis process): while it runs, its loop's thread
    and one other thread (the writer) are on one core and its analysis process on every
    core of the set it was started with; the web is covered as without the key."""
    async with Sim(sim_config(seed=41, hosts=4, pages_per_host=(15, 20), hosts_per_ip=1, robots_mix={"absent": 1.0},
                              p_nonhtml=0.05)) as sim:
        config = make_config(tmp_path, sim, output_mode="mirror", wait_duration=0.05, analysis_workers=1,
                             cpu_affinity="auto")
        conf = tmp_path / "larbin.conf"
        conf.write_text(format_config(config))
        errf = open(tmp_path / "crawler.err", "wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "larbin_py", "-c", str(conf), cwd=str(tmp_path),
            env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.DEVNULL, stderr=errf)
        errf.close()
        seen = {}
        try:
            def observe():
                """The crawler's threads' masks and its analysis process's, once all there."""
                try:
                    tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
                    masks = {tid: _task_mask(proc.pid, tid) for tid in tids}
                    kids = set()
                    for tid in tids:
                        with open(f"/proc/{proc.pid}/task/{tid}/children") as f:
                            kids.update(int(k) for k in f.read().split())
                    kid_masks = {kid: _task_mask(kid, kid) for kid in kids}
                except (FileNotFoundError, ProcessLookupError):
                    return False
                loop_mask = masks.get(proc.pid)
                if not kid_masks or loop_mask is None or (len(CPUS) > 1 and len(loop_mask) != 1):
                    return False
                seen.update(loop=loop_mask, threads=masks, kids=kid_masks)
                return True

            await wait_for(observe, 60, "the crawler never ran pinned beside its analysis process", step=0.01)
            assert await asyncio.wait_for(proc.wait(), 90) == 0, (tmp_path / "crawler.err").read_text()[-3000:]
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        err = (tmp_path / "crawler.err").read_text()
        if len(CPUS) > 1:
            (core,) = seen["loop"]
            assert f"cpuAffinity auto: the event loop and the writer thread on core {core}" in err, err
            pinned = [tid for tid, m in seen["threads"].items() if m == {core}]
            assert proc.pid in pinned and len(pinned) >= 2, seen  # the loop and the writer
            assert all(m == CPUS for m in seen["kids"].values()), seen  # the analysis process: every core
        else:
            assert "not pinned: the process may use one CPU only" in err, err
        truth = sim.truth(crawl_rules(config, sim.seeds))
        assert set(requested_urls(sim)) == truth.must_request


async def test_a_refused_pin_or_an_unreadable_run_delay_leaves_the_threads_free_said_once(pair, monkeypatch):
    """sched_setaffinity refused (a cpuset changed under the crawl) and schedstat unreadable
    later: one line each, the threads on every core, nothing pinned again."""
    import larbin_py.core_pin as core_pin

    real = os.sched_setaffinity

    def refuse_one_core(tid, cpus):
        if len(cpus) == 1:
            raise OSError(22, "Invalid argument")
        real(tid, cpus)

    pin = pair.pin()
    if pair.one_cpu(pin):
        return
    monkeypatch.setattr(core_pin.os, "sched_setaffinity", refuse_one_core)
    assert pair.start(pin) is False
    said = pin.err.getvalue()
    assert "sched_setaffinity refused core" in said and said.count("\n") == 1
    assert core_pin._loop_pin is None and core_pin._process_cpus is None  # nothing left active
    assert pair.masks() == (CPUS, CPUS)
    monkeypatch.setattr(core_pin.os, "sched_setaffinity", real)

    pin = pair.pin(CorePolicy(window=0.05))
    assert pair.start(pin)

    def unreadable():
        raise OSError(2, "No such file or directory")

    monkeypatch.setattr(core_pin, "run_delay", unreadable)
    await wait_for(lambda: pin.cpu is None, 10, "the pair stayed pinned without its run delay")
    assert "the loop's run delay is unreadable" in pin.err.getvalue()
    assert pair.masks() == (CPUS, CPUS)
    assert pin._timer is None  # no more looks: it stays free


async def test_a_pin_stopped_while_the_loop_starts_a_process_leaves_the_loop_free(pair):
    """The crawl's end racing a start from the loop (an analysis process replaced as the
    crawl stops): the start's end must not pin again a loop whose pin has stopped."""
    pin = pair.pin()
    if pair.one_cpu(pin):
        return
    assert pair.start(pin)
    with spawning():
        assert _mask(pair.me) == CPUS  # the process's set for the start
        with spawning():  # a second start meanwhile: still the process's set
            assert _mask(pair.me) == CPUS
        assert _mask(pair.me) == CPUS  # the first still under way
        pin.stop()
    assert _mask(pair.me) == CPUS and pin.cpu is None  # not pinned again after the stop
    again = pair.pin()
    assert pair.start(again)  # a new crawl may pin again
    assert pair.masks() == ({again.cpu}, {again.cpu})


#: Modules that start processes but never on a pinned loop, and why.
NEVER_PINNED = {
    "larbin_py/distributed/launcher.py": "the launcher starts workers and crawls nothing itself",
    "larbin_py/distributed/zygote.py": "the launcher's zygote forks workers",
    "larbin_py/distributed/redis_server.py": "a Redis started by the launcher or the tests",
    "larbin_py/analysis/command.py": "exec analyzers run in the analysis processes, which keep every core",
}
#: The calls that start a process, by the name they are called on.
_STARTS = {"asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
           "loop": {"subprocess_exec", "subprocess_shell"},
           "subprocess": {"Popen", "run", "call", "check_call", "check_output"},
           "os": {"fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "popen"}}


def test_every_process_started_in_the_crawl_process_is_started_inside_spawning():
    """A start added later without spawning() would give its child the pinned loop's one core:
    every call that starts a process in larbin_py is inside ``with spawning():`` unless its
    module never runs on a pinned loop (NEVER_PINNED, each with its reason)."""
    import ast

    starts, outside = [], []
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "larbin_py")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, ROOT)
            tree = ast.parse(open(path).read())

            def visit(node, inside: bool) -> None:
                if isinstance(node, (ast.With, ast.AsyncWith)) and any(
                        isinstance(item.context_expr, ast.Call) and getattr(item.context_expr.func, "id", "")
                        == "spawning" for item in node.items):
                    inside = True
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        node.func.attr in _STARTS.get(getattr(node.func.value, "id", ""), ()):
                    starts.append(f"{rel}:{node.lineno}")
                    if not inside and rel not in NEVER_PINNED:
                        outside.append(f"{rel}:{node.lineno}")
                for child in ast.iter_child_nodes(node):
                    visit(child, inside)

            visit(tree, False)
    assert len(starts) >= 7, starts  # the finder still finds the starts it is meant to
    assert outside == [], outside
