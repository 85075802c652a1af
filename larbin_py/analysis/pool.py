"""The analysis processes: started on demand, fed through a short line each, replaced when they die or hang.

Each process runs larbin_py.analysis.worker, spoken to over its stdin and
stdout (asyncio subprocess pipes: the loop never blocks on them).  A task
line goes in, one answer line comes back, in order; up to :data:`DEPTH`
tasks wait in a process's line.  The task at the head of the line has
``timeout`` seconds: past it the process is killed, a new one started, and
the try fails (``timeout``); the pipe ends without an answer (the process
was killed, or crashed): a new one is started and the try fails
(``crash``); the tasks behind it fail as ``bystander`` (not their fault).
The caller counts the try and decides (larbin_py.analysis.stage).
"""

from __future__ import annotations

import asyncio
import collections
import json
import signal
import sys

__all__ = ["TaskFailed", "WorkerPool"]

#: How long a new analysis process may take to import its analyzers, seconds.
START_TIMEOUT = 60.0
#: Tasks waiting in one process's line at most (see :meth:`WorkerPool.run`).
DEPTH = 4
#: Longest answer line (a page's links), bytes.
LINE_LIMIT = 64 << 20


class TaskFailed(Exception):
    """A try failed: ``reason`` is ``error`` (the analyzer raised or exited
    non-zero), ``timeout`` or ``crash``."""

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


class _Worker:
    """One analysis process, the tries waiting in its line, the timer of the first."""

    __slots__ = ("proc", "waiting", "timer", "reader", "expired", "dead")

    def __init__(self, proc) -> None:
        self.proc = proc
        self.waiting: collections.deque = collections.deque()
        self.timer = None
        self.reader = None
        self.expired = False
        self.dead = False


class WorkerPool:
    """``size`` analysis processes set up with ``setup`` (the worker's first line)."""

    def __init__(self, size: int, setup: dict, *, timeout: float, python: str = sys.executable, err=None,
                 depth: int = DEPTH) -> None:
        self.size = size
        self.depth = depth
        self._readers: set[asyncio.Task] = set()
        self.setup_line = json.dumps(setup, separators=(",", ":")).encode() + b"\n"
        self.timeout = timeout
        self.python = python
        self.err = err
        self._idle: asyncio.Queue = asyncio.Queue()
        #: Every live process (tests find the ones to kill here).
        self.procs: set = set()
        self.started = 0
        self.replaced = 0
        self.timeouts = 0
        self.crashes = 0
        self.busy = 0
        self._closing = False
        self._spawning: set[asyncio.Task] = set()

    async def start(self) -> None:
        """Start the processes and wait until each is ready (the ``analyze`` command;
        a crawl starts them on demand, :meth:`run`)."""
        procs = await asyncio.gather(*(self._spawn() for _ in range(self.size)))
        for proc in procs:
            self._adopt(proc)

    def _grow(self) -> None:
        """A task waits and no process has a free slot: one more, up to ``size``.

        On demand: a crawl that analyses nothing starts no process, and the
        first pages do not wait for all of them.
        """
        if self._idle.qsize() == 0 and len(self.procs) + len(self._spawning) < self.size:
            self.replaced -= 1  # a first start, not a replacement
            self._replace()

    async def _spawn(self):
        proc = await asyncio.create_subprocess_exec(
            self.python, "-m", "larbin_py.analysis.worker", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, limit=LINE_LIMIT)
        self.procs.add(proc)
        self.started += 1
        try:
            proc.stdin.write(self.setup_line)
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT)
        except BaseException:
            self._kill(proc)
            raise
        if not line.startswith(b'{"ready"'):
            code = await proc.wait()
            self.procs.discard(proc)
            raise RuntimeError(f"an analysis process could not start ({describe_exit(code)})")
        return proc

    def _adopt(self, proc) -> None:
        """A ready process: its reader started, its ``depth`` slots offered."""
        w = _Worker(proc)
        w.reader = asyncio.get_running_loop().create_task(self._read(w))
        self._readers.add(w.reader)
        w.reader.add_done_callback(self._readers.discard)
        for _ in range(self.depth):
            self._idle.put_nowait(w)

    def _kill(self, proc) -> None:
        self.procs.discard(proc)
        if proc.returncode is None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass

    def _arm(self, w: "_Worker") -> None:
        """The task at the head of ``w``'s line runs now: its timeout starts."""
        w.timer = asyncio.get_running_loop().call_later(self.timeout, self._expire, w)

    def _expire(self, w: "_Worker") -> None:
        """(Timer.) A try ran past the timeout: its process is killed (its reader sees the end)."""
        w.timer = None
        w.expired = True
        self._kill(w.proc)

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

    async def _read(self, w: "_Worker") -> None:
        """``w``'s answers, in order, to the tries waiting; at its end, their failures."""
        stdout = w.proc.stdout
        while True:
            try:
                line = await stdout.readline()
            except (OSError, ValueError, asyncio.LimitOverrunError):
                line = b""
            if not line.endswith(b"\n"):
                break
            fut = w.waiting.popleft()
            if w.timer is not None:
                w.timer.cancel()
                w.timer = None
            if w.waiting:
                self._arm(w)
            if not fut.done():
                fut.set_result(line)
        # The pipe ended: the process died, was killed (timeout), or was closed.
        w.dead = True
        if w.timer is not None:
            w.timer.cancel()
        self._kill(w.proc)
        code = await w.proc.wait()
        first = True
        while w.waiting:
            fut = w.waiting.popleft()
            if fut.done():
                continue
            if not first:
                exc = TaskFailed("bystander", "its analysis process ended while an earlier task ran")
            elif w.expired:
                self.timeouts += 1
                exc = TaskFailed("timeout", f"no answer after {self.timeout:g} s: the analysis process "
                                            "was killed and replaced")
            else:
                self.crashes += 1
                exc = TaskFailed("crash", f"the analysis process died ({describe_exit(code)}) and was replaced")
            fut.set_exception(exc)
            first = False
        self._replace()

    async def run(self, msg: dict) -> dict:
        """One try of one task: its answer, or :class:`TaskFailed`.

        Up to ``depth`` tasks wait in a process's line (its stdin pipe): it
        reads the next while the loop reads the last answer, and the loop is
        woken once for a batch of answers.  The timeout runs for the task at
        the head of the line; when a process dies, the task it was running
        fails (``crash`` or ``timeout``, counted) and those behind it fail as
        ``bystander`` (tried again at once, not counted).
        """
        self._grow()
        while True:
            w = await self._idle.get()
            if not w.dead:
                break  # (a dead process's slots are dropped as they come out)
        fut = asyncio.get_running_loop().create_future()
        try:
            w.proc.stdin.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
            if w.proc.stdin.transport.get_write_buffer_size() > 1 << 16:
                await w.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError, RuntimeError):
            raise TaskFailed("bystander", "its analysis process had ended") from None
        w.waiting.append(fut)
        if len(w.waiting) == 1:
            self._arm(w)
        self.busy += 1
        try:
            line = await fut
        except asyncio.CancelledError:  # the crawl stops: the process is mid-task
            self._kill(w.proc)
            raise
        finally:
            self.busy -= 1
        self._idle.put_nowait(w)  # the slot, back (a dead process's were not)
        reply = json.loads(line)
        if not reply.get("ok"):
            raise TaskFailed("error", str(reply.get("error", "unknown error")), str(reply.get("trace", "")))
        return reply

    async def close(self) -> None:
        """End every process: stdin closed (it exits at EOF), killed after a short wait."""
        self._closing = True
        for task in list(self._spawning):
            task.cancel()
        if self._spawning:
            await asyncio.gather(*self._spawning, return_exceptions=True)
        procs = list(self.procs)
        for proc in procs:
            if proc.stdin is not None and not proc.stdin.is_closing():
                proc.stdin.close()
        for proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), 2.0)
            except asyncio.TimeoutError:
                self._kill(proc)
                await proc.wait()
        self.procs.clear()
        if self._readers:
            await asyncio.gather(*list(self._readers), return_exceptions=True)

    def stats(self) -> dict:
        return {"processes": len(self.procs), "busy": self.busy, "started": self.started,
                "replaced": self.replaced, "timeouts": self.timeouts, "crashes": self.crashes}
