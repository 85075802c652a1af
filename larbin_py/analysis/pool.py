"""The analysis processes: started, fed one task at a time, replaced when they die or hang.

Each process runs larbin_py.analysis.worker, spoken to over its stdin and
stdout (asyncio subprocess pipes: the loop never blocks on them).  A task
lines goes in, one answer line comes back.  No answer within ``timeout``
seconds: the process is killed, a new one started, and the try fails
(``timeout``); the pipe ends without an answer (the process was killed, or
crashed): a new one is started and the try fails (``crash``).  Either way
the caller counts the try and decides (larbin_py.analysis.stage).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys

__all__ = ["TaskFailed", "WorkerPool"]

#: How long a new analysis process may take to import its analyzers, seconds.
START_TIMEOUT = 60.0
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


class WorkerPool:
    """``size`` analysis processes set up with ``setup`` (the worker's first line)."""

    def __init__(self, size: int, setup: dict, *, timeout: float, python: str = sys.executable, err=None) -> None:
        self.size = size
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
            self._idle.put_nowait(proc)

    def _grow(self) -> None:
        """A task waits and no process is idle: one more, up to ``size``.

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

    def _kill(self, proc) -> None:
        self.procs.discard(proc)
        if proc.returncode is None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass

    def _expire(self, proc, expired: list) -> None:
        """(Timer.) A try ran past the timeout: its process is killed."""
        expired.append(True)
        self._kill(proc)

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
            self._idle.put_nowait(proc)
            return

    async def run(self, msg: dict) -> dict:
        """One try of one task on an idle process: its answer, or :class:`TaskFailed`."""
        self._grow()
        proc = await self._idle.get()
        self.busy += 1
        # The timeout is a timer that kills the process (its pipe then ends):
        # cheaper per task than wait_for, which wraps the read in a task of its own.
        expired = []
        timer = asyncio.get_running_loop().call_later(self.timeout, self._expire, proc, expired)
        try:
            try:
                proc.stdin.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
                if proc.stdin.transport.get_write_buffer_size() > 1 << 16:
                    await proc.stdin.drain()
                line = await proc.stdout.readline()
            except (BrokenPipeError, ConnectionResetError, RuntimeError):
                line = b""  # the process is gone (its pipe closed, or the transport already shut)
            except BaseException:  # cancelled (the crawl stops): the process is mid-task
                self._kill(proc)
                raise
            finally:
                timer.cancel()
            if expired:
                self.timeouts += 1
                await proc.wait()
                self._replace()
                raise TaskFailed("timeout", f"no answer after {self.timeout:g} s: the analysis process "
                                            "was killed and replaced")
            if not line.endswith(b"\n"):
                self.crashes += 1
                self._kill(proc)
                code = await proc.wait()
                self._replace()
                raise TaskFailed("crash", f"the analysis process died ({describe_exit(code)}) and was replaced")
            self._idle.put_nowait(proc)
        finally:
            self.busy -= 1
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

    def stats(self) -> dict:
        return {"processes": len(self.procs), "busy": self.busy, "started": self.started,
                "replaced": self.replaced, "timeouts": self.timeouts, "crashes": self.crashes}
