"""The analysis processes: started on demand, fed through a line each, replaced when they die or hang.

Each process runs larbin_py.analysis.analyzer_process, spoken to over its stdin and
stdout through a :class:`asyncio.SubprocessProtocol` (no coroutine, future
or queue per task: the pipe's data callback hands each answer line to the
task's ``done`` callback directly).  A job (one page's tasks) is one line
in, one answer line back, in order; up to ``depth`` jobs wait in a
process's line.  The lines written in one loop iteration go out in one
``write()`` per process (:meth:`WorkerPool.submit` batches them); the
process reads them as a chunk and writes their answers at once.

Timeouts: one lazy timer per process.  The job at the head of the line has
``timeout`` seconds from when it became the head (its predecessor's answer,
or its own write to an idle process); past it the process is killed, a new
one started, and the job fails (``timeout``); an ``exec`` command it was
running goes with it, its whole process group (:meth:`_Proc.kill`; the
process kills a command's group itself at 0.9 × the timeout, so this is
the fallback for a process that could not).  The pipe ends without an
answer (the process was killed, or crashed): a new one is started and the
job fails (``crash``); the jobs behind it fail as ``bystander`` (not their
fault).  The caller counts the tries and decides (larbin_py.analysis.stage).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import sys

from ..core_pin import spawning
from ..loopclock import clock_step
from .command import kill_with_groups

__all__ = ["TaskFailed", "WorkerPool", "DEPTH"]

#: How long a new analysis process may take to import its analyzers, seconds.
START_TIMEOUT = 60.0
#: Jobs waiting in one process's line at most.
DEPTH = 16


class TaskFailed(Exception):
    """A try failed: ``reason`` is ``error`` (the analyzer raised or exited
    non-zero), ``timeout``, ``crash`` or ``bystander``."""

    def __init__(self, reason: str, message: str, trace: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.trace = trace


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def warm_size(size: int) -> int:
    """How many of ``size`` processes a crawl starts with itself: one a usable core."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return min(size, max(1, cores))


class _Proc(asyncio.SubprocessProtocol):
    """One analysis process: its pipes, the jobs in its line, its timer."""

    def __init__(self, pool: "WorkerPool") -> None:
        self.pool = pool
        self.transport = None
        self.stdin = None
        self.buf = b""
        self.ready: asyncio.Future = asyncio.get_running_loop().create_future()
        #: Done when every pipe closed and the process was reaped.
        self.gone: asyncio.Future = asyncio.get_running_loop().create_future()
        #: (job, done) in the order written.
        self.waiting: collections.deque = collections.deque()
        self.out: list[bytes] = []
        self.head_since = 0.0
        self.timer = None
        self.expired = False
        self.dead = False
        self.adopted = False

    # -- what tests and the pool see of the process --------------------------
    @property
    def pid(self) -> int | None:
        return self.transport.get_pid() if self.transport is not None else None

    @property
    def returncode(self) -> int | None:
        return self.transport.get_returncode() if self.transport is not None else None

    def kill(self) -> None:
        """SIGKILL the process, and the process group of each ``exec`` command it runs
        (larbin_py.analysis.command.kill_with_groups: a command's group outlives the
        process that started it)."""
        if self.transport is not None and self.transport.get_returncode() is None:
            try:
                kill_with_groups(self.transport.get_pid())
            except ProcessLookupError:
                pass

    # -- the protocol -------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.stdin = transport.get_pipe_transport(0)

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd != 1:
            return
        buf = self.buf + data if self.buf else data
        cut = buf.rfind(b"\n") + 1
        if not cut:
            self.buf = buf
            return
        self.buf = buf[cut:]
        lines = buf[:cut].split(b"\n")
        lines.pop()
        if not self.ready.done():
            first = lines.pop(0)
            if first.startswith(b'{"ready"'):
                self.ready.set_result(True)
            else:
                self.ready.set_exception(RuntimeError(f"an analysis process said {first[:200]!r}"))
        if lines:
            self.pool._answers(self, lines)

    def pipe_connection_lost(self, fd: int, exc) -> None:
        if fd == 1:  # no answer can come any more: the process is done for
            self.dead = True
            self.kill()

    def process_exited(self) -> None:
        self.dead = True

    def connection_lost(self, exc) -> None:
        """Every pipe closed and the process reaped: the jobs in its line fail."""
        self.dead = True
        if not self.ready.done():
            self.ready.set_exception(RuntimeError(
                f"an analysis process could not start ({describe_exit(self.returncode)})"))
        if not self.gone.done():
            self.gone.set_result(None)
        self.pool._ended(self)


class WorkerPool:
    """``size`` analysis processes set up with ``setup`` (the worker's first line).

    :meth:`submit` a job's line with its ``done(job, answer)`` callback
    (``answer``: the answer line, or a :class:`TaskFailed`); ``on_slot`` is
    called when a slot frees or a process becomes ready (the caller submits
    what waited).
    """

    def __init__(self, size: int, setup: dict, *, timeout: float, python: str = sys.executable, err=None,
                 depth: int = DEPTH) -> None:
        self.size = size
        self.depth = depth
        self.setup_line = json.dumps(setup, separators=(",", ":")).encode() + b"\n"
        self.timeout = timeout
        self.python = python
        self.err = err
        #: Ready processes (tests find the ones to kill here).
        self.procs: set[_Proc] = set()
        self.started = 0
        self.replaced = 0
        self.timeouts = 0
        self.crashes = 0
        self.busy = 0
        #: The largest peak RSS of a process, KiB (read as they are closed or die).
        self.peak_rss_kb = 0
        self.on_slot = None
        self._closing = False
        self._spawning: set[asyncio.Task] = set()
        self._flush_handle = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- processes ------------------------------------------------------------
    async def start(self) -> None:
        """Start the processes and wait until each is ready (the ``analyze`` command;
        a crawl starts them on demand, :meth:`submit`)."""
        self._loop = asyncio.get_running_loop()
        procs = await asyncio.gather(*(self._spawn() for _ in range(self.size)))
        for proc in procs:
            self._adopt(proc)

    def warm(self) -> None:
        """Start missing processes now, in the background (a crawl's start), at most
        one a core (:func:`warm_size`: more would only compete with the loop for the
        cores while they import; the pool grows to ``size`` as tasks wait,
        :meth:`_grow`); each is adopted when ready, and counts in :meth:`free` only then."""
        self._loop = asyncio.get_running_loop()
        target = warm_size(self.size)
        while len(self.procs) + len(self._spawning) < target:
            self.replaced -= 1  # a first start, not a replacement
            self._replace()

    def free(self) -> int:
        """Jobs that can be submitted now or once the processes to start are ready."""
        n = sum(self.depth - len(p.waiting) for p in self.procs if not p.dead)
        return n + self.depth * max(0, self.size - len(self.procs) - len(self._spawning))

    async def _spawn(self) -> _Proc:
        loop = asyncio.get_running_loop()
        self.started += 1
        with spawning():  # every core for it, when the loop is pinned to one (cpuAffinity)
            _t, proc = await loop.subprocess_exec(lambda: _Proc(self), self.python, "-m",
                                                  "larbin_py.analysis.analyzer_process", stdin=asyncio.subprocess.PIPE,
                                                  stdout=asyncio.subprocess.PIPE, stderr=None)
        try:
            proc.stdin.write(self.setup_line)
            await asyncio.wait_for(asyncio.shield(proc.ready), START_TIMEOUT)
        except BaseException:
            # Given up (a timeout, or the pool closing while it started): its ready line
            # will fail when it dies, and nobody waits for it any more.
            proc.ready.add_done_callback(lambda f: f.cancelled() or f.exception())
            proc.kill()
            raise
        return proc

    def _adopt(self, proc: _Proc) -> None:
        if proc.dead:  # it died between its ready line and now
            self._replace()
            return
        proc.adopted = True
        self.procs.add(proc)
        if self.on_slot is not None:
            self.on_slot()

    def _grow(self) -> None:
        """A job waits and no process has a free slot: one more, up to ``size``."""
        if len(self.procs) + len(self._spawning) < self.size:
            self.replaced -= 1  # a first start, not a replacement
            self._replace()

    def _replace(self) -> None:
        """Start a process in place of a dead one (in the background)."""
        if self._closing:
            return
        self.replaced += 1
        task = asyncio.get_running_loop().create_task(self._respawn())
        self._spawning.add(task)
        task.add_done_callback(self._spawning.discard)

    async def _respawn(self) -> None:
        delay = 0.1
        while not self._closing:
            try:
                proc = await self._spawn()
            except (OSError, RuntimeError, asyncio.TimeoutError) as exc:
                if self.err is not None:
                    print(f"larbin_py: cannot start an analysis process: {exc}; trying again", file=self.err)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            self._adopt(proc)
            return

    # -- jobs -----------------------------------------------------------------
    def submit(self, line: bytes, job, done) -> bool:
        """Put ``line`` in the line of the least busy process with a free slot;
        False when none has one (a process is started if there is room for one)."""
        best = None
        for p in self.procs:
            if not p.dead and len(p.waiting) < self.depth and (best is None or len(p.waiting) < len(best.waiting)):
                best = p
        if best is None:
            self._grow()
            return False
        loop = self._loop or asyncio.get_running_loop()
        self._loop = loop
        if not best.waiting:
            best.head_since = loop.time()
            if best.timer is None:
                best.timer = loop.call_at(best.head_since + self.timeout, self._check, best)
        best.waiting.append((job, done))
        best.out.append(line)
        self.busy += 1
        if self._flush_handle is None:
            self._flush_handle = loop.call_soon(self._flush)
        return True

    def _flush(self) -> None:
        """(Once per loop iteration.) Each process's new lines in one write."""
        self._flush_handle = None
        for p in self.procs:
            if p.out:
                data = b"".join(p.out) if len(p.out) > 1 else p.out[0]
                p.out = []
                if not p.dead:
                    try:
                        p.stdin.write(data)
                    except (BrokenPipeError, ConnectionResetError, RuntimeError):
                        p.kill()  # its end fails its line

    def _check(self, p: _Proc) -> None:
        """(A process's timer.) The head job ran past the timeout: the process is killed."""
        p.timer = None
        if p.dead or not p.waiting:
            return
        loop = self._loop
        due = p.head_since + self.timeout
        if loop.time() >= due:
            p.expired = True
            p.kill()
        else:
            p.timer = loop.call_at(due + clock_step(loop), self._check, p)  # never early (larbin_py.loopclock)

    def _answers(self, p: _Proc, lines: list[bytes]) -> None:
        """Answer lines from ``p``, in the order of its line."""
        waiting = p.waiting
        self.busy -= len(lines)
        for line in lines:
            job, done = waiting.popleft()
            done(job, line)
        p.head_since = self._loop.time()
        if self.on_slot is not None:
            self.on_slot()

    def _ended(self, p: _Proc) -> None:
        """``p`` ended: its head job failed (``crash`` or ``timeout``), the rest are bystanders."""
        self.procs.discard(p)
        if p.timer is not None:
            p.timer.cancel()
            p.timer = None
        if not p.adopted:
            return  # it never started: _respawn tries again
        failed = []
        first = True
        while p.waiting:
            job, done = p.waiting.popleft()
            self.busy -= 1
            if not first:
                exc = TaskFailed("bystander", "its analysis process ended while an earlier task ran")
            elif p.expired:
                self.timeouts += 1
                exc = TaskFailed("timeout", f"no answer after {self.timeout:g} s: the analysis process "
                                            "was killed and replaced")
            elif self._closing:
                exc = TaskFailed("bystander", "the analysis processes were closed")
            else:
                self.crashes += 1
                exc = TaskFailed("crash", f"the analysis process died ({describe_exit(p.returncode)}) "
                                          "and was replaced")
            failed.append((job, done, exc))
            first = False
        self._replace()
        for job, done, exc in failed:
            done(job, exc)
        if self.on_slot is not None:
            self.on_slot()

    async def close(self) -> None:
        """End every process: stdin closed (it exits at EOF), killed after a short wait."""
        self._closing = True
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        for task in list(self._spawning):
            task.cancel()
        if self._spawning:
            await asyncio.gather(*self._spawning, return_exceptions=True)
        procs = list(self.procs)
        for p in procs:
            self._note_rss(p)
            if p.stdin is not None and not p.stdin.is_closing():
                p.stdin.close()
        for p in procs:
            try:
                await asyncio.wait_for(asyncio.shield(p.gone), 2.0)
            except asyncio.TimeoutError:
                p.kill()
                await p.gone
            p.transport.close()
        self.procs.clear()

    def _note_rss(self, p: _Proc) -> None:
        """The process's peak RSS (VmHWM, Linux), kept as the pool's largest."""
        try:
            with open(f"/proc/{p.pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmHWM:"):
                        self.peak_rss_kb = max(self.peak_rss_kb, int(line.split()[1]))
                        break
        except (OSError, ValueError, TypeError):
            pass

    def stats(self) -> dict:
        return {"processes": len(self.procs), "peak_rss_mb": round(self.peak_rss_kb / 1024, 1), "busy": self.busy, "started": self.started,
                "replaced": self.replaced, "timeouts": self.timeouts, "crashes": self.crashes}
