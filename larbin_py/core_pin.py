"""The crawl loop and its writer thread kept on one core (``cpuAffinity auto``): the edge.

Why, and when the pair is freed again, is larbin_py.core_policy's.  Here
are the calls (Linux):

* :meth:`CorePin.start` (on the loop's thread, once the writer thread
  runs): the process's CPU set is kept, the core the loop runs on is read
  (``sched_getcpu``, libc through ctypes) and both threads are pinned to it
  (``sched_setaffinity`` by thread id).  Then every
  :data:`~larbin_py.core_policy.WINDOW` seconds a timer reads the loop's
  run delay (``/proc/thread-self/schedstat``, its second field: nanoseconds
  runnable and waiting for a core) and applies the policy: the pair freed
  (the process's set back), or pinned again to the loop's core of the
  moment.  A release is said in one line on stderr.
* :meth:`CorePin.stop`: the process's set back on both threads.
* A thread or a process takes the CPU set of the thread that starts it.
  The loop starts the analysis processes, Chromium and alert commands:
  :func:`spawning` gives the loop the process's set for the time of such a
  start.  The process's own thread pools (the seen store's merges, the
  sitemap reader) start their threads with :func:`release_thread`, which
  gives the new thread the process's set.  A thread of the loop's default
  executor (``asyncio.to_thread``: the ZooKeeper client's calls) or of
  libuv (a server's ``getaddrinfo``) started after the pin shares the
  loop's core: they do next to nothing.

Limits: a CPU set of one CPU has nothing to gain (nothing is pinned); a
platform without ``sched_getcpu`` or per-thread ``schedstat`` (not Linux)
runs unpinned, said in one line.  The set is the one the process had at the
start: a cgroup's cpuset changed later is not followed (a failing call
frees the pair, said once).

Errors (never fatal: the crawl runs on, unpinned):

=====================================  ======================================
what                                   what happens
=====================================  ======================================
no ``sched_getcpu`` / ``schedstat``     not pinned, one line at the start
``sched_setaffinity`` refused           the pair freed, one line, not pinned again
schedstat unreadable later              the pair freed, one line
=====================================  ======================================
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from contextlib import contextmanager

from .core_policy import FREE, PIN, CorePolicy

__all__ = ["CorePin", "available", "release_thread", "spawning"]

#: The process's CPU set while a pin is active (None: nothing pinned, nothing to restore).
_process_cpus: frozenset[int] | None = None
#: The loop thread's pin, restored after :func:`spawning`: ``[thread id, cpu, spawns under way]``.
_loop_pin: list | None = None


def _load_getcpu():
    try:
        fn = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_int, []
    return fn


_getcpu = _load_getcpu() if sys.platform.startswith("linux") else None


def available() -> str | None:
    """None when pinning can work here, else why not (one line)."""
    if _getcpu is None or not hasattr(os, "sched_setaffinity"):
        return "this platform has no sched_getcpu or sched_setaffinity (Linux only)"
    if not os.path.exists("/proc/thread-self/schedstat"):
        return "/proc/thread-self/schedstat is missing (a kernel without CONFIG_SCHED_INFO)"
    return None


def run_delay() -> float:
    """The calling thread's total run delay (seconds waiting for a core while runnable)."""
    with open("/proc/thread-self/schedstat", "rb") as f:
        return int(f.read().split()[1]) / 1e9


def release_thread() -> None:
    """(A thread pool's initializer.) The calling thread gets the process's CPU set while a pin
    is active: it was started by the pinned loop, whose set it took."""
    cpus = _process_cpus
    if cpus is not None:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:
            pass


@contextmanager
def spawning():
    """Around the start of a child process from the loop's thread: the child takes the
    process's CPU set, not the loop's one core (the loop is pinned again after)."""
    pin, cpus = _loop_pin, _process_cpus
    if pin is None or cpus is None or threading.get_native_id() != pin[0]:
        yield
        return
    if pin[2] == 0:
        _set(pin[0], cpus)
    pin[2] += 1
    try:
        yield
    finally:
        pin[2] -= 1
        if pin[2] == 0 and _loop_pin is pin and pin[1] is not None:
            _set(pin[0], {pin[1]})


def _set(tid: int, cpus) -> bool:
    try:
        os.sched_setaffinity(tid, cpus)
    except OSError:
        return False
    return True


class CorePin:
    """The loop thread and the writer thread on one core while it is theirs (see the module docstring).

    ``policy``: a :class:`~larbin_py.core_policy.CorePolicy`; ``err``: where the
    one-line reports go.  ``cpu`` is the core the pair is on (None: free); the
    releases are counted in ``policy.releases``.
    """

    def __init__(self, policy: CorePolicy | None = None, *, err=None) -> None:
        self.policy = policy or CorePolicy()
        self.err = err if err is not None else sys.stderr
        self.cpu: int | None = None
        self.cpus: frozenset[int] = frozenset()
        self._tids: tuple[int, ...] = ()
        self._loop = None
        self._timer = None
        self._broken = False

    def start(self, loop, writer_tid: int) -> bool:
        """Pin the calling thread (the loop's) and ``writer_tid`` to the loop's core; False when not."""
        global _process_cpus, _loop_pin
        why = available()
        if why is None:
            self.cpus = frozenset(os.sched_getaffinity(0))
            if len(self.cpus) < 2:
                why = "the process may use one CPU only"
        if why is not None:
            print(f"larbin_py: cpuAffinity auto: not pinned: {why}", file=self.err)
            return False
        self._loop = loop
        self._tids = (threading.get_native_id(), writer_tid)
        _process_cpus = self.cpus
        _loop_pin = [self._tids[0], None, 0]
        if not self._pin():
            _loop_pin = _process_cpus = None
            return False
        self.policy.start(loop.time(), run_delay())
        self._timer = loop.call_later(self.policy.window, self._check)
        return True

    def _pin(self) -> bool:
        cpu = _getcpu()
        if cpu < 0 or cpu not in self.cpus:
            return self._fail("sched_getcpu gave no core of the process's set")
        _loop_pin[1] = cpu
        for tid in self._tids:
            if not _set(tid, {cpu}):
                return self._fail(f"sched_setaffinity refused core {cpu}")
        self.cpu = cpu
        return True

    def _free(self) -> None:
        if _loop_pin is not None:
            _loop_pin[1] = None
        for tid in self._tids:
            _set(tid, self.cpus)
        self.cpu = None

    def _fail(self, why: str) -> bool:
        self._free()
        self._broken = True
        print(f"larbin_py: cpuAffinity auto: {why}: the loop and the writer run unpinned from now on",
              file=self.err)
        return False

    def _check(self) -> None:
        self._timer = None
        if self._broken or self._loop is None:
            return
        try:
            delay = run_delay()
        except (OSError, ValueError, IndexError) as exc:
            self._fail(f"the loop's run delay is unreadable ({exc})")
            return
        now = self._loop.time()
        cpu = self.cpu
        action = self.policy.observe(now, delay)
        if action == FREE:
            self._free()
            p = self.policy
            print(f"larbin_py: cpuAffinity auto: core {cpu} is shared (the loop waited for it "
                  f"{p.last_share:.0%} of the last {p.window:g} s): the loop and the writer run on any core "
                  f"for {p.free_until - now:.0f} s", file=self.err)
        elif action == PIN:
            self._pin()
        if not self._broken:
            self._timer = self._loop.call_later(self.policy.window, self._check)

    def stop(self) -> None:
        """Unpin both threads (the crawl's end, while the writer thread still runs: a thread id
        is used again once its thread has ended); the process's set back."""
        global _process_cpus, _loop_pin
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._tids and not self._broken:
            self._free()
        self._loop = None
        _loop_pin = None
        _process_cpus = None
